// SPDX-License-Identifier: MIT
// phx::Gather on the compat engine over the fake CUDA driver
// (tests/fakecuda): scattered paged blocks land in their slots byte for byte
// with the staging slots reused many times over (and copies slowed down),
// blocks past the end of the file fail alone, a refused copy fails only its
// request, scatters write what the GPU holds, and the stream-ordered
// variants keep the stream's order.  tests/gpu runs the same on a GPU.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "fake_gpu.hpp"
#include "phoenix/gather.hpp"
#include "test_support.hpp"

namespace phx::test {
namespace {

constexpr std::uint64_t kSeed = 91;

struct GatherCase {
  std::size_t blocks;
  std::size_t block;
  unsigned depth;
  std::size_t max_request;
  unsigned delay_us;
};

// Readable parameters in ctest's listing.
void PrintTo(const GatherCase &c, std::ostream *os) {
  *os << c.blocks << "x" << c.block << " depth " << c.depth << " max " << c.max_request << " delay "
      << c.delay_us;
}

using CompatGatherFake = FakeGpuTest;

class CompatGatherShapes : public CompatGatherFake,
                           public ::testing::WithParamInterface<GatherCase> {};

INSTANTIATE_TEST_SUITE_P(FakeGpu, CompatGatherShapes,
                         ::testing::Values(GatherCase{1, 16384, 0, 0, 0},
                                           GatherCase{3000, 16384, 0, 0, 0},
                                           GatherCase{5000, 8192, 8, 65536, 0},
                                           GatherCase{600, 65536, 4, 0, 0},
                                           GatherCase{400, 16384, 2, 16384, 500}),
                         [](const ::testing::TestParamInfo<GatherCase> &param_info) {
                           const GatherCase &c = param_info.param;
                           return std::to_string(c.blocks) + "x" + std::to_string(c.block) +
                                  "_depth" + std::to_string(c.depth) + "_max" +
                                  std::to_string(c.max_request) + "_delay" +
                                  std::to_string(c.delay_us);
                         });

// Half the slots in runs (merged), half shuffled.
std::vector<std::uint64_t> half_shuffled(std::size_t count) {
  std::vector<std::uint64_t> slots(count);
  for (std::size_t i = 0; i < count; ++i) {
    slots[i] = i;
  }
  std::shuffle(slots.begin() + static_cast<std::ptrdiff_t>(count / 2), slots.end(),
               std::mt19937_64(count));
  return slots;
}

std::vector<std::uint64_t> iota(std::size_t count) {
  std::vector<std::uint64_t> ids(count);
  for (std::size_t i = 0; i < count; ++i) {
    ids[i] = i;
  }
  return ids;
}

void expect_blocks(const std::vector<std::byte> &pool, std::size_t block,
                   const std::vector<std::uint64_t> &blocks,
                   const std::vector<std::uint64_t> &slots) {
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto bad =
        find_mismatch({pool.data() + slots[i] * block, block}, kSeed, blocks[i] * block);
    ASSERT_FALSE(bad.has_value()) << "block " << blocks[i] << " in slot " << slots[i];
  }
}

TEST_P(CompatGatherShapes, ScatteredBlocksLandInTheirSlots) {
  const GatherCase c = GetParam();
  write_pattern_file(dir_ / "kv", c.blocks * c.block, kSeed);
  auto dev = Device::open(0, Engine::compat);
  FakeDeviceMemory pool(c.blocks * c.block);
  pool.fill(std::byte{0x5a});
  auto reg = dev.register_memory(pool.data(), pool.size());
  File file(dir_ / "kv", O_RDONLY);
  const auto blocks = iota(c.blocks);
  const auto slots = half_shuffled(c.blocks);
  Gather gather(dev, {.max_request = c.max_request, .queue_depth = c.depth});
  phx_fake_cuda_set_op_delay_us(c.delay_us);
  const GatherResult r = gather.read(paged_blocks(file, reg, c.block, blocks, slots));
  phx_fake_cuda_set_op_delay_us(0);
  EXPECT_TRUE(r.ok()) << r.failures.size() << " failures";
  EXPECT_EQ(r.bytes, c.blocks * c.block);
  expect_blocks(pool.download(), c.block, blocks, slots);
}

TEST_F(CompatGatherFake, PastEndOfFileFailsOnlyThoseBlocks) {
  constexpr std::size_t kBlock = 16384;
  write_pattern_file(dir_ / "kv", 5 * kBlock, kSeed);
  auto dev = Device::open(0, Engine::compat);
  FakeDeviceMemory pool(8 * kBlock);
  pool.fill(std::byte{0});
  auto reg = dev.register_memory(pool.data(), pool.size());
  File file(dir_ / "kv", O_RDONLY);
  const auto ids = iota(8);
  Gather gather(dev);
  const GatherResult r = gather.read(paged_blocks(file, reg, kBlock, ids, ids));
  ASSERT_EQ(r.failures.size(), 3U);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(r.failures[k].index, 5 + k);
    EXPECT_EQ(r.failures[k].error, 0);
    EXPECT_EQ(r.failures[k].bytes, 0U);
  }
  const auto pool_bytes = pool.download();
  EXPECT_FALSE(find_mismatch({pool_bytes.data(), 5 * kBlock}, kSeed, 0).has_value());
}

struct RefusedCopyCase {
  const char *name;
  bool batch;  // whether the driver takes batched copies
};

void PrintTo(const RefusedCopyCase &c, std::ostream *os) {
  *os << c.name;
}

class RefusedCopy : public CompatGatherFake, public ::testing::WithParamInterface<RefusedCopyCase> {
 protected:
  void TearDown() override {
    phx_fake_cuda_set_batches_supported(1);
    CompatGatherFake::TearDown();
  }
};

INSTANTIATE_TEST_SUITE_P(FakeGpu, RefusedCopy,
                         ::testing::Values(RefusedCopyCase{"Batched", true},
                                           RefusedCopyCase{"OneByOne", false}),
                         [](const ::testing::TestParamInfo<RefusedCopyCase> &param_info) {
                           return std::string(param_info.param.name);
                         });

// The driver refuses one copy: that request fails with an errno, every
// other block still lands.  Batched, the driver refuses a whole batch; the
// mover then copies that batch one by one, and the one copy refused then
// is the only failure.
TEST_P(RefusedCopy, FailsOnlyItsRequest) {
  constexpr std::size_t kBlock = 16384;
  constexpr std::size_t kCount = 64;
  phx_fake_cuda_set_batches_supported(GetParam().batch ? 1 : 0);
  write_pattern_file(dir_ / "kv", kCount * kBlock, kSeed);
  auto dev = Device::open(0, Engine::compat);
  FakeDeviceMemory pool(kCount * kBlock);
  pool.fill(std::byte{0});
  auto reg = dev.register_memory(pool.data(), pool.size());
  File file(dir_ / "kv", O_RDONLY);
  const auto blocks = iota(kCount);
  auto slots = iota(kCount);
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(5));  // nothing merges
  Gather gather(dev);
  const phx_fake_cuda_counts before = fake_counts();
  ASSERT_TRUE(gather.read(paged_blocks(file, reg, kBlock, blocks, slots)).ok());
  const phx_fake_cuda_counts between = fake_counts();
  if (GetParam().batch) {
    EXPECT_GE(between.copy_batches - before.copy_batches, 1) << "no copy went in a batch";
  } else {
    EXPECT_EQ(between.copy_batches, before.copy_batches) << "a refused batch was counted";
  }
  EXPECT_EQ(between.copies - before.copies, static_cast<long>(kCount));
  pool.fill(std::byte{0});
  if (GetParam().batch) {
    phx_fake_cuda_fail_call("cuMemcpyBatchAsync", 1, 1);
    phx_fake_cuda_fail_call("cuMemcpyHtoDAsync", 1, 1);
  } else {
    phx_fake_cuda_fail_call("cuMemcpyHtoDAsync", 10, 1);
  }
  const GatherResult r = gather.read(paged_blocks(file, reg, kBlock, blocks, slots));
  EXPECT_EQ(fake_counts().copies - between.copies, static_cast<long>(kCount - 1));
  ASSERT_EQ(r.failures.size(), 1U);
  EXPECT_EQ(r.failures[0].error, EFAULT);  // CUDA_ERROR_INVALID_VALUE
  EXPECT_EQ(r.bytes, (kCount - 1) * kBlock);
  const std::size_t failed = r.failures[0].index;
  const auto pool_bytes = pool.download();
  for (std::size_t i = 0; i < kCount; ++i) {
    if (i != failed) {
      const auto bad =
          find_mismatch({pool_bytes.data() + slots[i] * kBlock, kBlock}, kSeed, blocks[i] * kBlock);
      ASSERT_FALSE(bad.has_value()) << "block " << i << " (the failed one is " << failed << ")";
    }
  }
}

// A pool freed and allocated again at the same address: every request on
// it fails with EFAULT, and the new owner's bytes stay as they were.
TEST_F(CompatGatherFake, ReallocatedPoolIsRefused) {
  constexpr std::size_t kBlock = 16384;
  write_pattern_file(dir_ / "kv", 8 * kBlock, kSeed);
  auto dev = Device::open(0, Engine::compat);
  auto pool = std::make_unique<FakeDeviceMemory>(8 * kBlock);
  auto reg = dev.register_memory(pool->data(), pool->size());
  void *const address = pool->data();
  pool.reset();
  const FakeDeviceMemory next(8 * kBlock);
  ASSERT_EQ(next.data(), address) << "the fake driver did not hand the address out again";
  next.fill(std::byte{0x33});
  File file(dir_ / "kv", O_RDONLY);
  const auto ids = iota(8);
  Gather gather(dev);
  const GatherResult r = gather.read(paged_blocks(file, reg, kBlock, ids, ids));
  ASSERT_EQ(r.failures.size(), ids.size()) << "gathered into a reallocated pool";
  for (const GatherFailure &f : r.failures) {
    EXPECT_EQ(f.error, EFAULT);
    EXPECT_EQ(f.bytes, 0U);
  }
  EXPECT_EQ(r.bytes, 0U);
  const auto bytes = next.download();
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), std::byte{0x33}),
            static_cast<std::ptrdiff_t>(bytes.size()));
}

TEST_F(CompatGatherFake, ScatterWritesWhatTheGpuHolds) {
  constexpr std::size_t kBlock = 16384;
  constexpr std::size_t kCount = 700;
  auto dev = Device::open(0, Engine::compat);
  FakeDeviceMemory pool(kCount * kBlock);
  const auto blocks = iota(kCount);
  std::vector<std::uint64_t> slots(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    slots[i] = kCount - 1 - i;
  }
  std::vector<std::byte> host(kCount * kBlock);
  for (std::size_t i = 0; i < kCount; ++i) {
    fill_pattern({host.data() + slots[i] * kBlock, kBlock}, kSeed, blocks[i] * kBlock);
  }
  pool.upload(host);
  auto reg = dev.register_memory(pool.data(), pool.size());
  {
    File file(dir_ / "out", O_RDWR | O_CREAT);
    Gather gather(dev, {.queue_depth = 16});
    phx_fake_cuda_set_op_delay_us(100);
    const GatherResult r = gather.write(paged_blocks(file, reg, kBlock, blocks, slots));
    phx_fake_cuda_set_op_delay_us(0);
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.bytes, kCount * kBlock);
  }
  const auto data = read_whole_file(dir_ / "out");
  ASSERT_EQ(data.size(), kCount * kBlock);
  EXPECT_FALSE(find_mismatch(data, kSeed, 0).has_value());
}

TEST_F(CompatGatherFake, StreamOrderedScatterWaitsForTheWorkBeforeIt) {
  constexpr std::size_t kBlock = 65536;
  constexpr std::size_t kCount = 64;
  auto dev = Device::open(0, Engine::compat);
  FakeDeviceMemory pool(kCount * kBlock);
  pool.fill(std::byte{0});
  auto reg = dev.register_memory(pool.data(), pool.size());
  File file(dir_ / "out", O_RDWR | O_CREAT);
  const auto ids = iota(kCount);
  const FakeStream stream;
  // A 200 ms "kernel" fills the pool: a scatter that does not wait writes zeros.
  ASSERT_EQ(phx_fake_cuda_enqueue_fill(stream.get(), pool.device_pointer(), pool.size(), 9, 200000),
            0);
  Gather gather(dev);
  GatherResult result;
  result.bytes = 12345;  // must be overwritten
  gather.write_on_stream(paged_blocks(file, reg, kBlock, ids, ids), &result, stream.get());
  stream.synchronize();
  EXPECT_TRUE(result.ok());
  EXPECT_EQ(result.bytes, kCount * kBlock);
  const auto data = read_whole_file(dir_ / "out");
  ASSERT_EQ(data.size(), kCount * kBlock);
  EXPECT_EQ(std::count(data.begin(), data.end(), std::byte{9}),
            static_cast<std::ptrdiff_t>(data.size()));
}

TEST_F(CompatGatherFake, StreamOrderedGatherHoldsBackTheWorkAfterIt) {
  constexpr std::size_t kBlock = 16384;
  constexpr std::size_t kCount = 512;
  write_pattern_file(dir_ / "kv", kCount * kBlock, kSeed);
  auto dev = Device::open(0, Engine::compat);
  FakeDeviceMemory pool(kCount * kBlock);
  pool.fill(std::byte{0});
  auto reg = dev.register_memory(pool.data(), pool.size());
  File file(dir_ / "kv", O_RDONLY);
  const auto blocks = iota(kCount);
  auto slots = iota(kCount);
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(1));
  const FakeStream stream;
  Gather gather(dev);
  GatherResult result;
  gather.read_on_stream(paged_blocks(file, reg, kBlock, blocks, slots), &result, stream.get());
  // A copy enqueued after the gather must see every gathered block.
  std::vector<std::byte> seen(kCount * kBlock);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(seen.data(), pool.device_pointer(), seen.size(), stream.get()), 0);
  stream.synchronize();
  EXPECT_TRUE(result.ok());
  expect_blocks(seen, kBlock, blocks, slots);
}

}  // namespace
}  // namespace phx::test
