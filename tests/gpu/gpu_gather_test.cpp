// SPDX-License-Identifier: MIT
// phx::Gather on the compat engine: scattered paged blocks land in device
// memory byte for byte (staging slots reused many times over), blocks past
// the end of the file fail alone, scatters write what the GPU holds, and the
// stream-ordered variant waits for earlier kernels and holds back later ones.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <ostream>
#include <random>
#include <string>

#include "gpu_support.hpp"
#include "kernels.hpp"
#include "phoenix/gather.hpp"

namespace phx::test {
namespace {

constexpr std::uint64_t kSeed = 77;

struct GatherCase {
  std::size_t blocks;
  std::size_t block;
  unsigned depth;
  std::size_t max_request;
};

// Readable names in ctest's listing.
void PrintTo(const GatherCase &c, std::ostream *os) {
  *os << c.blocks << "x" << c.block << " depth " << c.depth << " max " << c.max_request;
}

class CompatGather : public GpuTest, public ::testing::WithParamInterface<GatherCase> {};

INSTANTIATE_TEST_SUITE_P(Shapes, CompatGather,
                         ::testing::Values(GatherCase{1, 16384, 0, 0},
                                           GatherCase{3000, 16384, 0, 0},
                                           GatherCase{5000, 8192, 8, 65536},
                                           GatherCase{600, 65536, 4, 0}),
                         [](const ::testing::TestParamInfo<GatherCase> &param_info) {
                           const GatherCase &c = param_info.param;
                           return std::to_string(c.blocks) + "x" + std::to_string(c.block) +
                                  "_depth" + std::to_string(c.depth) + "_max" +
                                  std::to_string(c.max_request);
                         });

TEST_P(CompatGather, ScatteredBlocksLandInTheirSlots) {
  const GatherCase c = GetParam();
  const auto path = dir_ / "kv";
  write_pattern_file(path, c.blocks * c.block, kSeed);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory pool(c.blocks * c.block);
  pool.fill(0x5a);
  auto reg = dev.register_memory(pool.data(), pool.size());
  File file(path, O_RDONLY);
  std::vector<std::uint64_t> blocks(c.blocks);
  std::vector<std::uint64_t> slots(c.blocks);
  for (std::size_t i = 0; i < c.blocks; ++i) {
    blocks[i] = i;
    // Half the slots in runs (merge), half scattered.
    slots[i] = i;
  }
  std::shuffle(slots.begin() + static_cast<std::ptrdiff_t>(c.blocks / 2), slots.end(),
               std::mt19937_64(c.blocks));
  Gather gather(dev, {.max_request = c.max_request, .queue_depth = c.depth});
  const GatherResult r = gather.read(paged_blocks(file, reg, c.block, blocks, slots));
  EXPECT_TRUE(r.ok()) << r.failures.size() << " failures, first errno "
                      << (r.failures.empty() ? 0 : r.failures[0].error);
  EXPECT_EQ(r.bytes, c.blocks * c.block);
  const auto host = pool.to_host(0, pool.size());
  for (std::size_t i = 0; i < c.blocks; ++i) {
    const auto bad =
        find_mismatch({host.data() + slots[i] * c.block, c.block}, kSeed, blocks[i] * c.block);
    ASSERT_FALSE(bad.has_value()) << "block " << blocks[i] << " in slot " << slots[i];
  }
}

TEST_F(GpuTest, CompatGatherPastEndOfFileFailsOnlyThoseBlocks) {
  constexpr std::size_t kBlock = 16384;
  const auto path = dir_ / "kv";
  write_pattern_file(path, 5 * kBlock, kSeed);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory pool(8 * kBlock);
  auto reg = dev.register_memory(pool.data(), pool.size());
  File file(path, O_RDONLY);
  const std::vector<std::uint64_t> ids = {0, 1, 2, 3, 4, 5, 6, 7};
  Gather gather(dev);
  const GatherResult r = gather.read(paged_blocks(file, reg, kBlock, ids, ids));
  ASSERT_EQ(r.failures.size(), 3U);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(r.failures[k].index, 5 + k);
    EXPECT_EQ(r.failures[k].error, 0);
    EXPECT_EQ(r.failures[k].bytes, 0U);
  }
  const auto host = pool.to_host(0, 5 * kBlock);
  EXPECT_FALSE(find_mismatch(host, kSeed, 0).has_value());
}

TEST_F(GpuTest, CompatScatterWritesWhatTheGpuHolds) {
  constexpr std::size_t kBlock = 16384;
  constexpr std::size_t kCount = 700;
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory pool(kCount * kBlock);
  std::vector<std::uint64_t> blocks(kCount);
  std::vector<std::uint64_t> slots(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    blocks[i] = i;
    slots[i] = kCount - 1 - i;
  }
  std::vector<std::byte> host(kCount * kBlock);
  for (std::size_t i = 0; i < kCount; ++i) {
    fill_pattern({host.data() + slots[i] * kBlock, kBlock}, kSeed, blocks[i] * kBlock);
  }
  pool.upload(0, host.data(), host.size());
  auto reg = dev.register_memory(pool.data(), pool.size());
  {
    File file(dir_ / "out", O_RDWR | O_CREAT);
    Gather gather(dev, {.queue_depth = 16});
    const GatherResult r = gather.write(paged_blocks(file, reg, kBlock, blocks, slots));
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.bytes, kCount * kBlock);
  }
  const auto data = read_whole_file(dir_ / "out");
  ASSERT_EQ(data.size(), kCount * kBlock);
  EXPECT_FALSE(find_mismatch(data, kSeed, 0).has_value());
}

TEST_F(GpuTest, StreamOrderedScatterWaitsForTheKernelBeforeIt) {
  constexpr std::size_t kBlock = 65536;
  constexpr std::size_t kCount = 64;
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory pool(kCount * kBlock);
  pool.fill(0);
  auto reg = dev.register_memory(pool.data(), pool.size());
  File file(dir_ / "out", O_RDWR | O_CREAT);
  std::vector<std::uint64_t> ids(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    ids[i] = i;
  }
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // The kernel takes 200 ms: a scatter that does not wait writes zeros.
  launch_slow_fill(pool.data(), pool.size(), 9, 200.0, stream);
  Gather gather(dev);
  GatherResult result;
  result.bytes = 12345;  // must be overwritten
  gather.write_on_stream(paged_blocks(file, reg, kBlock, ids, ids), &result,
                         reinterpret_cast<CUstream_st *>(stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(result.ok());
  EXPECT_EQ(result.bytes, kCount * kBlock);
  const auto data = read_whole_file(dir_ / "out");
  ASSERT_EQ(data.size(), kCount * kBlock);
  for (std::size_t i = 0; i < data.size(); ++i) {
    ASSERT_EQ(static_cast<std::uint8_t>(data[i]), slow_fill_byte(9, i)) << "byte " << i;
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST_F(GpuTest, StreamOrderedGatherHoldsBackTheKernelAfterIt) {
  constexpr std::size_t kBlock = 16384;
  constexpr std::size_t kCount = 512;
  const auto path = dir_ / "kv";
  write_pattern_file(path, kCount * kBlock, kSeed);
  auto dev = Device::open(0, Engine::compat);
  DeviceMemory pool(kCount * kBlock);
  pool.fill(0);
  auto reg = dev.register_memory(pool.data(), pool.size());
  File file(path, O_RDONLY);
  std::vector<std::uint64_t> blocks(kCount);
  std::vector<std::uint64_t> slots(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    blocks[i] = i;
    slots[i] = i;
  }
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(1));
  DeviceMemory sum(sizeof(unsigned long long));
  sum.fill(0);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // CUDA loads a kernel at its first launch (lazy loading, the default since
  // 12.2), and loading waits for the context's streams: the first launch of
  // a kernel queued behind a stream-ordered read would wait for the read,
  // which waits for the stream.  Load it first, as docs/kvcache.md tells users.
  launch_checksum(sum.data(), 0, reinterpret_cast<unsigned long long *>(sum.data()), stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  sum.fill(0);
  Gather gather(dev);
  GatherResult result;
  gather.read_on_stream(paged_blocks(file, reg, kBlock, blocks, slots), &result,
                        reinterpret_cast<CUstream_st *>(stream));
  launch_checksum(pool.data(), pool.size(), reinterpret_cast<unsigned long long *>(sum.data()),
                  stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(result.ok());
  std::vector<std::byte> expected(kCount * kBlock);
  for (std::size_t i = 0; i < kCount; ++i) {
    fill_pattern({expected.data() + slots[i] * kBlock, kBlock}, kSeed, blocks[i] * kBlock);
  }
  unsigned long long got = 0;
  const auto bytes = sum.to_host(0, sizeof(got));
  std::memcpy(&got, bytes.data(), sizeof(got));
  EXPECT_EQ(got, host_checksum(expected.data(), expected.size()));
  CUDA_OK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace phx::test
