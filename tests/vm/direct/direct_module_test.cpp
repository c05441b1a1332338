// SPDX-License-Identifier: MIT
// libphoenix's direct engine against the real phxfs.ko, in the rig's guest:
// the same library code as on a GPU machine, with the PCI BAR provider
// standing in for the GPU (a "device address" is a byte offset into the
// BAR).  The guest checks device memory through the registration; the
// independent check is the host's: every range left in place is reported
// as evidence and compared with the ivshmem file and the ext4 image after
// the VM exits.  (sysfs resource2 cannot be mapped while phxfs holds the
// BAR: Debian's kernels have CONFIG_IO_STRICT_DEVMEM.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"

namespace {

// Device 1's BAR bytes [192 MiB, 256 MiB) belong to this test; lower ranges
// hold bytes the host compares after the run.
constexpr std::uint64_t kBase = 192ULL << 20;
constexpr int kDevice = 1;

std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  std::uint64_t x = seed;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    v[i] = static_cast<std::byte>(x >> 56);
  }
  return v;
}

void *dev_addr(std::uint64_t offset) {
  return reinterpret_cast<void *>(kBase + offset);
}

class RealModule : public ::testing::Test {
 protected:
  void SetUp() override {
    const char *dir = std::getenv("PHX_EXT4_DIR");
    const char *bdfs = std::getenv("PHX_PCIBAR_BDFS");
    if (dir == nullptr || bdfs == nullptr) {
      GTEST_SKIP() << "needs the rig's PHX_EXT4_DIR and PHX_PCIBAR_BDFS";
    }
    dir_ = std::filesystem::path(dir) / "phx" / "libphoenix";
    std::filesystem::create_directories(dir_);
    report_ = std::getenv("PHX_REPORT");
  }
  void write_file(const std::string &name, const std::vector<std::byte> &data) {
    const int fd = ::open((dir_ / name).c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  std::vector<std::byte> read_file(const std::string &name) {
    std::vector<std::byte> out(std::filesystem::file_size(dir_ / name));
    const int fd = ::open((dir_ / name).c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_EQ(::read(fd, out.data(), out.size()), static_cast<ssize_t>(out.size()));
    ::close(fd);
    return out;
  }
  // The host compares BAR bytes [kBase + offset, +n) with the file's bytes.
  void evidence(std::uint64_t offset, const std::string &name, std::uint64_t file_offset,
                std::size_t n) {
    if (report_ == nullptr) {
      return;
    }
    if (FILE *out = std::fopen(report_, "a")) {
      std::fprintf(out,
                   "PHX-EVIDENCE {\"kind\":\"shm_eq_file\",\"shm\":%d,\"shm_off\":%llu,"
                   "\"path\":\"phx/libphoenix/%s\",\"file_off\":%llu,\"len\":%zu}\n",
                   kDevice, static_cast<unsigned long long>(kBase + offset), name.c_str(),
                   static_cast<unsigned long long>(file_offset), n);
      std::fclose(out);
    }
  }

  std::filesystem::path dir_;
  const char *report_ = nullptr;
};

bool equals(const std::byte *device, const std::byte *data, std::size_t n) {
  return std::memcmp(device, data, n) == 0;
}

TEST_F(RealModule, AutoPicksTheDirectEngine) {
  auto dev = phx::Device::open(kDevice);
  EXPECT_EQ(dev.engine(), phx::Engine::direct);
}

TEST_F(RealModule, ReadLandsInDeviceMemory) {
  const auto data = pattern(4 << 20, 1);
  write_file("read.bin", data);
  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  auto reg = dev.register_memory(dev_addr(0), data.size());
  phx::File f(dir_ / "read.bin", O_RDONLY);
  ASSERT_TRUE(f.direct_io());
  EXPECT_EQ(f.read(reg, 0, data.size(), 0), data.size());
  EXPECT_TRUE(equals(reg.host_view(), data.data(), data.size()));
  evidence(0, "read.bin", 0, data.size());
}

TEST_F(RealModule, WriteTakesBytesFromDeviceMemory) {
  const auto data = pattern(1 << 20, 2);
  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  auto reg = dev.register_memory(dev_addr(8 << 20), data.size());
  std::memcpy(reg.host_view(), data.data(), data.size());
  phx::File f(dir_ / "write.bin", O_RDWR | O_CREAT);
  EXPECT_EQ(f.write(reg, 0, data.size(), 0), data.size());
  f.sync();
  EXPECT_EQ(read_file("write.bin"), data);
  evidence(8 << 20, "write.bin", 0, data.size());
}

TEST_F(RealModule, UnalignedRangesAndOffsets) {
  const auto data = pattern(1 << 20, 3);
  write_file("unaligned.bin", data);
  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  const std::uint64_t off = (16 << 20) + 4096 + 100;
  auto reg = dev.register_memory(dev_addr(off), 300000);
  phx::File f(dir_ / "unaligned.bin", O_RDONLY);
  EXPECT_EQ(f.read(reg, 7, 250001, 12345), 250001U);
  EXPECT_TRUE(equals(reg.host_view() + 7, data.data() + 12345, 250001));
  evidence(off + 7, "unaligned.bin", 12345, 250001);
  // Reads past the end of the file stop there.  Like pread(2) with O_DIRECT,
  // the destination bytes past the returned count are unspecified (the
  // kernel zero-fills what lies beyond EOF), so this read gets its own room.
  EXPECT_EQ(f.read(reg, 260000, 40000, data.size() - 1000), 1000U);
  EXPECT_TRUE(equals(reg.host_view() + 260000, data.data() + data.size() - 1000, 1000));
  evidence(off + 260000, "unaligned.bin", data.size() - 1000, 1000);
}

TEST_F(RealModule, IoQueueReadsIntoDeviceMemory) {
  const auto data = pattern(2 << 20, 4);
  write_file("queue.bin", data);
  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  auto reg = dev.register_memory(dev_addr(24 << 20), data.size());
  phx::File f(dir_ / "queue.bin", O_RDONLY);
  std::vector<phx::IoRequest> reqs;
  for (std::uint64_t i = 0; i < 32; ++i) {
    reqs.push_back(phx::IoRequest::read(f, reg, i * 65536, 65536, (31 - i) * 65536, i));
  }
  phx::IoQueue q(8);
  for (const auto &c : q.run(reqs)) {
    ASSERT_EQ(c.error, 0);
  }
  for (std::uint64_t i = 0; i < 32; ++i) {
    ASSERT_TRUE(equals(reg.host_view() + i * 65536, data.data() + (31 - i) * 65536, 65536)) << i;
    evidence((24 << 20) + i * 65536, "queue.bin", (31 - i) * 65536, 65536);
  }
}

TEST_F(RealModule, PaperCApi) {
  const auto data = pattern(1 << 20, 5);
  write_file("capi.bin", data);
  ASSERT_EQ(phxfs_open(kDevice), 0) << phxfs_last_error();
  void *gpu = dev_addr(32 << 20);
  void *target = nullptr;
  ASSERT_EQ(phxfs_regmem(kDevice, gpu, data.size(), &target), 0) << phxfs_last_error();
  const int fd = ::open((dir_ / "capi.bin").c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  // The paper's way: pread straight into the address regmem returned.
  auto *view = static_cast<std::byte *>(target);
  ASSERT_EQ(::pread(fd, target, data.size(), 0), static_cast<ssize_t>(data.size()));
  EXPECT_TRUE(equals(view, data.data(), data.size()));
  std::memset(target, 0, data.size());
  EXPECT_EQ(phxfs_read(phxfs_fileid_t{fd, kDevice}, gpu, 0, data.size(), 0),
            static_cast<ssize_t>(data.size()));
  EXPECT_TRUE(equals(view, data.data(), data.size()));
  evidence(32 << 20, "capi.bin", 0, data.size());
  ::close(fd);
  EXPECT_EQ(phxfs_deregmem(kDevice, gpu, data.size()), 0) << phxfs_last_error();
  EXPECT_EQ(phxfs_close(kDevice), 0);
}

TEST_F(RealModule, ModuleCountersReturnToZero) {
  {
    auto dev = phx::Device::open(kDevice, phx::Engine::direct);
    auto reg = dev.register_memory(dev_addr(40 << 20), 1 << 20);
    const auto live = phx::query_module_device(kDevice);
    EXPECT_EQ(live.regs_live, 1U);
    EXPECT_EQ(live.pages_mapped, 256U);
  }
  const auto after = phx::query_module_device(kDevice);
  EXPECT_EQ(after.regs_live, 0U);
  EXPECT_EQ(after.pages_mapped, 0U);
}

}  // namespace
