// SPDX-License-Identifier: MIT
// phx::Gather on the direct engine against the real phxfs.ko, in the rig's
// guest: paged blocks gathered from an ext4 file into "device memory" (the
// pcibar provider's BAR, device addresses being BAR byte offsets), scattered
// back out, batches far beyond the ring, and per-entry end of file.  The
// guest checks through the registration; blocks left in place are reported
// as evidence, which the host compares with the ivshmem file and the ext4
// image after the VM exits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "phoenix/gather.hpp"
#include "phoenix/phoenix.hpp"

namespace {

// Device 1's BAR bytes [160 MiB, 192 MiB) belong to this test.
constexpr std::uint64_t kBase = 160ULL << 20;
constexpr std::uint64_t kEnd = 192ULL << 20;
constexpr int kDevice = 1;

// The byte at file offset o of every test file: blocks never look alike.
std::byte file_byte(std::uint64_t o) {
  std::uint64_t z = (o / 8) * 0x9e3779b97f4a7c15ULL;
  z ^= z >> 29;
  return static_cast<std::byte>((z >> ((o % 8) * 8)) & 0xff);
}

std::vector<std::byte> file_bytes(std::uint64_t offset, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = file_byte(offset + i);
  }
  return v;
}

void *dev_addr(std::uint64_t offset) {
  return reinterpret_cast<void *>(kBase + offset);
}

class GatherModule : public ::testing::Test {
 protected:
  void SetUp() override {
    const char *dir = std::getenv("PHX_EXT4_DIR");
    if (dir == nullptr || std::getenv("PHX_PCIBAR_BDFS") == nullptr) {
      GTEST_SKIP() << "needs the rig's PHX_EXT4_DIR and PHX_PCIBAR_BDFS";
    }
    dir_ = std::filesystem::path(dir) / "phx" / "gather";
    std::filesystem::create_directories(dir_);
    report_ = std::getenv("PHX_REPORT");
  }
  void write_file(const std::string &name, std::size_t size) {
    const auto data = file_bytes(0, size);
    const int fd = ::open((dir_ / name).c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  // The host compares BAR bytes [kBase + offset, +n) with the file's bytes.
  void evidence(std::uint64_t offset, const std::string &name, std::uint64_t file_offset,
                std::size_t n) {
    ASSERT_LE(kBase + offset + n, kEnd);
    if (report_ == nullptr) {
      return;
    }
    if (FILE *out = std::fopen(report_, "a")) {
      std::fprintf(out,
                   "PHX-EVIDENCE {\"kind\":\"shm_eq_file\",\"shm\":%d,\"shm_off\":%llu,"
                   "\"path\":\"phx/gather/%s\",\"file_off\":%llu,\"len\":%zu}\n",
                   kDevice, static_cast<unsigned long long>(kBase + offset), name.c_str(),
                   static_cast<unsigned long long>(file_offset), n);
      std::fclose(out);
    }
  }

  std::filesystem::path dir_;
  const char *report_ = nullptr;
};

// [0, 12 MiB): 768 blocks of 16 KiB, half in runs, half scattered.
TEST_F(GatherModule, PagedBlocksLandInDeviceMemory) {
  constexpr std::size_t kBlock = 16384;
  constexpr std::size_t kCount = 768;
  write_file("kv.bin", kCount * kBlock);
  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  auto pool = dev.register_memory(dev_addr(0), kCount * kBlock);
  std::memset(pool.host_view(), 0, pool.size());
  phx::File file(dir_ / "kv.bin", O_RDONLY);
  ASSERT_TRUE(file.direct_io());
  std::vector<std::uint64_t> blocks(kCount);
  std::vector<std::uint64_t> slots(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    blocks[i] = i;
    slots[i] = i;
  }
  std::shuffle(slots.begin() + kCount / 2, slots.end(), std::mt19937_64(3));
  phx::Gather gather(dev, {.queue_depth = 32});
  const phx::GatherResult r = gather.read(phx::paged_blocks(file, pool, kBlock, blocks, slots));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.bytes, kCount * kBlock);
  EXPECT_LT(r.requests, kCount);  // the runs merged
  for (std::size_t i = 0; i < kCount; ++i) {
    const auto want = file_bytes(blocks[i] * kBlock, kBlock);
    ASSERT_EQ(std::memcmp(pool.host_view() + slots[i] * kBlock, want.data(), kBlock), 0)
        << "block " << blocks[i] << " in slot " << slots[i];
  }
  for (std::size_t i = kCount / 2; i < kCount / 2 + 16; ++i) {
    evidence(slots[i] * kBlock, "kv.bin", blocks[i] * kBlock, kBlock);
  }
  evidence(0, "kv.bin", 0, kCount / 2 * kBlock);
}

// [12 MiB, 20 MiB): 512 blocks of 16 KiB written out from device memory.
TEST_F(GatherModule, ScatterWritesDeviceMemoryToTheFile) {
  constexpr std::size_t kBlock = 16384;
  constexpr std::size_t kCount = 512;
  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  auto pool = dev.register_memory(dev_addr(12 << 20), kCount * kBlock);
  std::vector<std::uint64_t> blocks(kCount);
  std::vector<std::uint64_t> slots(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    blocks[i] = i;
    slots[i] = (i * 37) % kCount;  // 37 is coprime with 512: a permutation
    const auto data = file_bytes(blocks[i] * kBlock, kBlock);
    std::memcpy(pool.host_view() + slots[i] * kBlock, data.data(), kBlock);
  }
  {
    phx::File file(dir_ / "offload.bin", O_RDWR | O_CREAT);
    phx::Gather gather(dev, {.queue_depth = 16});
    const phx::GatherResult r = gather.write(phx::paged_blocks(file, pool, kBlock, blocks, slots));
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.bytes, kCount * kBlock);
    file.sync();
  }
  const int fd = ::open((dir_ / "offload.bin").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<std::byte> back(kCount * kBlock);
  ASSERT_EQ(::pread(fd, back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
  ::close(fd);
  EXPECT_EQ(back, file_bytes(0, back.size()));
  evidence((12 << 20) + slots[5] * kBlock, "offload.bin", blocks[5] * kBlock, kBlock);
}

// [20 MiB, 28 MiB): 2000 blocks of 4 KiB, reversed, through a ring of 8.
TEST_F(GatherModule, BatchesFarBeyondTheRing) {
  constexpr std::size_t kBlock = 4096;
  constexpr std::size_t kCount = 2000;
  write_file("many.bin", kCount * kBlock);
  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  auto pool = dev.register_memory(dev_addr(20 << 20), kCount * kBlock);
  phx::File file(dir_ / "many.bin", O_RDONLY);
  std::vector<std::uint64_t> blocks(kCount);
  std::vector<std::uint64_t> slots(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    blocks[i] = kCount - 1 - i;
    slots[i] = i;
  }
  phx::Gather gather(dev, {.queue_depth = 8});
  const phx::GatherResult r = gather.read(phx::paged_blocks(file, pool, kBlock, blocks, slots));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.requests, kCount);  // reversed: nothing merges
  for (std::size_t i = 0; i < kCount; ++i) {
    const auto want = file_bytes(blocks[i] * kBlock, kBlock);
    ASSERT_EQ(std::memcmp(pool.host_view() + slots[i] * kBlock, want.data(), kBlock), 0)
        << "block " << blocks[i];
  }
  evidence((20 << 20) + 7 * kBlock, "many.bin", blocks[7] * kBlock, kBlock);
}

// [28 MiB, 29 MiB): a merged run crossing the end of the file.
TEST_F(GatherModule, BlocksPastTheEndFailAlone) {
  constexpr std::size_t kBlock = 16384;
  write_file("short.bin", 5 * kBlock);
  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  auto pool = dev.register_memory(dev_addr(28 << 20), 8 * kBlock);
  phx::File file(dir_ / "short.bin", O_RDONLY);
  const std::vector<std::uint64_t> ids = {0, 1, 2, 3, 4, 5, 6, 7};
  phx::Gather gather(dev);
  const phx::GatherResult r = gather.read(phx::paged_blocks(file, pool, kBlock, ids, ids));
  ASSERT_EQ(r.failures.size(), 3U);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(r.failures[k].index, 5 + k);
    EXPECT_EQ(r.failures[k].error, 0);
    EXPECT_EQ(r.failures[k].bytes, 0U);
  }
  EXPECT_EQ(r.bytes, 5 * kBlock);
  const auto want = file_bytes(0, 5 * kBlock);
  EXPECT_EQ(std::memcmp(pool.host_view(), want.data(), want.size()), 0);
  evidence(28 << 20, "short.bin", 0, 5 * kBlock);
}

}  // namespace
