// SPDX-License-Identifier: MIT
// transfer() when the kernel refuses peer-to-peer DMA (EREMOTEIO): on
// kernels with CONFIG_PCI_P2PDMA, O_DIRECT into device pages fails that way
// on storage without P2PDMA support (NFS, NVMe over TCP, device-mapper) or
// too far on the PCI bus.  This executable interposes pread/pwrite: a
// request whose buffer lies in the pretend device memory fails with
// EREMOTEIO and moves nothing, as the block layer does; every other
// request reaches the file.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include <gtest/gtest.h>

#include "io/aligned_io.hpp"
#include "test_support.hpp"

namespace {

std::atomic<const std::byte *> device_lo{nullptr};
std::atomic<const std::byte *> device_hi{nullptr};
std::atomic<int> refused{0};
std::atomic<int> reached{0};

// Takes the address as a number: pread's buffer is write-only to the
// compiler, which would take passing it as a pointer for reading it.
bool touches_device(std::uintptr_t p, std::size_t n) {
  return p < reinterpret_cast<std::uintptr_t>(device_hi.load()) &&
         p + n > reinterpret_cast<std::uintptr_t>(device_lo.load());
}

}  // namespace

extern "C" ssize_t pread(int fd, void *buf, size_t n, off_t off) {
  if (touches_device(reinterpret_cast<std::uintptr_t>(buf), n)) {
    refused++;
    errno = EREMOTEIO;
    return -1;
  }
  reached++;
  return syscall(SYS_pread64, fd, buf, n, off);
}

extern "C" ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
  if (touches_device(reinterpret_cast<std::uintptr_t>(buf), n)) {
    refused++;
    errno = EREMOTEIO;
    return -1;
  }
  reached++;
  return syscall(SYS_pwrite64, fd, buf, n, off);
}

namespace phx::detail {
namespace {

constexpr std::uint64_t kSeed = 41;

class P2pRefused : public ::testing::Test {
 protected:
  static constexpr std::size_t kSize = 3 * 1024 * 1024 + 3 * 4096;

  void SetUp() override {
    device_lo = device_.data();
    device_hi = device_.data() + device_.size();
    refused = 0;
    reached = 0;
    policy_.direct = true;
    policy_.offset_align = 4096;
    policy_.memory_align = 4096;
    policy_.chunk_size = 256 * 1024;
  }
  void TearDown() override {
    device_lo = nullptr;
    device_hi = nullptr;
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  void open_file(int flags) {
    fd_ = ::open((dir_ / "file").c_str(), flags | O_CLOEXEC, 0644);
    ASSERT_GE(fd_, 0) << std::strerror(errno);
  }

  test::TempDir dir_;
  test::AlignedBuffer device_{kSize};
  int fd_ = -1;
  IoPolicy policy_;
};

TEST_F(P2pRefused, ReadStagesThroughHostMemoryAndDeliversEveryByte) {
  test::write_pattern_file(dir_ / "file", kSize, kSeed);
  open_file(O_RDONLY);
  std::memset(device_.data(), 0xee, kSize);

  const TransferResult r = transfer(Direction::read, fd_, device_.data(), kSize, 0, policy_);
  EXPECT_EQ(r.error, 0) << std::strerror(r.error);
  EXPECT_EQ(r.done, kSize);
  EXPECT_EQ(test::find_mismatch(device_.span(), kSeed, 0), std::nullopt);
  // One refusal; the rest of the request never offers device memory again.
  EXPECT_EQ(refused.load(), 1);
  EXPECT_GE(reached.load(), static_cast<int>(kSize / policy_.chunk_size));
}

TEST_F(P2pRefused, WriteStagesThroughHostMemoryAndStoresEveryByte) {
  open_file(O_RDWR | O_CREAT | O_TRUNC);
  test::fill_pattern(device_.span(), kSeed, 8192);

  const TransferResult r = transfer(Direction::write, fd_, device_.data(), kSize, 8192, policy_);
  EXPECT_EQ(r.error, 0) << std::strerror(r.error);
  EXPECT_EQ(r.done, kSize);
  const auto got = test::read_whole_file(dir_ / "file");
  ASSERT_EQ(got.size(), kSize + 8192);
  EXPECT_EQ(test::find_mismatch(std::span(got).subspan(8192), kSeed, 8192), std::nullopt);
  EXPECT_EQ(refused.load(), 1);
}

TEST_F(P2pRefused, ReadStopsAtEndOfFileAfterTheFallback) {
  test::write_pattern_file(dir_ / "file", kSize / 2, kSeed);
  open_file(O_RDONLY);
  const TransferResult r = transfer(Direction::read, fd_, device_.data(), kSize, 0, policy_);
  EXPECT_EQ(r.error, 0) << std::strerror(r.error);
  EXPECT_EQ(r.done, kSize / 2);
  EXPECT_EQ(test::find_mismatch(device_.span().first(kSize / 2), kSeed, 0), std::nullopt);
}

}  // namespace
}  // namespace phx::detail
