// SPDX-License-Identifier: MIT
// The compat engine's pinned staging on the fake CUDA driver: large
// staging is our own huge-page-aligned mapping, faulted in and registered
// with the driver, small staging the driver's allocation; a refused
// registration falls back to the driver's allocation; every buffer gives
// its pinning and its mapping back; forked children do not inherit it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "engines/compat/staging_pool.hpp"
#include "fake_cuda.h"
#include "fake_gpu.hpp"

namespace phx::test {
namespace {

using detail::PinnedBuffer;
using StagingPool = FakeGpuTest;

constexpr int kCudaErrorNotSupported = 801;
constexpr int kCudaErrorOutOfMemory = 2;

// Whether [data, data + size) is mapped in this process (msync says ENOMEM
// for a range with unmapped pages).
bool mapped(std::byte *data, std::size_t size) {
  const std::size_t into_page = reinterpret_cast<std::uintptr_t>(data) % 4096;
  return msync(data - into_page, size + into_page, MS_ASYNC) == 0;
}

TEST_F(StagingPool, LargeStagingIsRegisteredHugePageMemory) {
  const auto before = fake_counts();
  constexpr std::size_t kSize = (std::size_t{5} << 20) + 4096;  // not a huge-page multiple
  {
    PinnedBuffer b = PinnedBuffer::staging(kSize);
    ASSERT_TRUE(b.registered());
    ASSERT_EQ(b.size(), kSize);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % PinnedBuffer::kHugeStaging, 0U)
        << "not on a huge-page boundary: THP cannot back it";
    const auto live = fake_counts();
    EXPECT_EQ(live.host_allocs, before.host_allocs + 1);
    EXPECT_EQ(live.host_registered, before.host_registered + 1);
    std::memset(b.data(), 0xa5, b.size());
    EXPECT_EQ(b.data()[kSize - 1], std::byte{0xa5});

    PinnedBuffer moved = std::move(b);
    EXPECT_TRUE(moved.registered());
    std::byte *data = moved.data();
    moved = PinnedBuffer();
    EXPECT_FALSE(mapped(data, kSize)) << "the mapping outlived its buffer";
    EXPECT_EQ(fake_counts().host_registered, before.host_registered) << "still registered";
  }
  EXPECT_EQ(fake_counts().host_allocs, before.host_allocs);
}

TEST_F(StagingPool, SmallStagingIsTheDriversAllocation) {
  const auto before = fake_counts();
  {
    PinnedBuffer b = PinnedBuffer::staging(PinnedBuffer::kHugeStaging - 4096);
    EXPECT_FALSE(b.registered());
    EXPECT_EQ(fake_counts().host_allocs, before.host_allocs + 1);
    EXPECT_EQ(fake_counts().host_registered, before.host_registered);
  }
  EXPECT_EQ(fake_counts().host_allocs, before.host_allocs);
}

TEST_F(StagingPool, RefusedRegistrationFallsBackToTheDriversAllocation) {
  const auto before = fake_counts();
  phx_fake_cuda_fail_call("cuMemHostRegister_v2", 1, kCudaErrorNotSupported);
  {
    PinnedBuffer b = PinnedBuffer::staging(std::size_t{4} << 20);
    EXPECT_FALSE(b.registered());
    ASSERT_EQ(b.size(), std::size_t{4} << 20);
    std::memset(b.data(), 1, b.size());
    EXPECT_EQ(fake_counts().host_allocs, before.host_allocs + 1);
    EXPECT_EQ(fake_counts().host_registered, before.host_registered);
  }
  EXPECT_EQ(fake_counts().host_allocs, before.host_allocs);
}

TEST_F(StagingPool, BothRefusedReportsTheAllocationsError) {
  const auto before = fake_counts();
  phx_fake_cuda_fail_call("cuMemHostRegister_v2", 1, kCudaErrorNotSupported);
  phx_fake_cuda_fail_call("cuMemHostAlloc", 1, kCudaErrorOutOfMemory);
  int error = 0;
  std::string what;
  try {
    (void)PinnedBuffer::staging(std::size_t{4} << 20);
  } catch (const std::system_error &e) {
    error = e.code().value();
    what = e.what();
  }
  EXPECT_EQ(error, ENOMEM) << what;
  EXPECT_NE(what.find("cuMemHostAlloc"), std::string::npos) << what;
  EXPECT_EQ(fake_counts().host_allocs, before.host_allocs) << "a failed pin kept something";
}

// Whether this process holds @p marker at @p at.  Through /proc/self/mem,
// which reads any page the process has mapped and fails on an unmapped
// one; the address alone proves nothing in a child, where the hole a
// MADV_DONTFORK mapping leaves can be mapped again (ThreadSanitizer's
// runtime does) and reading it directly could fault.
bool holds(const std::byte *at, const std::string &marker) {
  const int fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  std::string seen(marker.size(), '\0');
  const ssize_t got =
      pread(fd, seen.data(), seen.size(), static_cast<off_t>(reinterpret_cast<std::uintptr_t>(at)));
  close(fd);
  return got == static_cast<ssize_t>(marker.size()) && seen == marker;
}

// A child of fork() never uses its parent's engines (shared_engines.hpp
// forgets them), so their pinned staging is not copied into it.
TEST_F(StagingPool, ForkedChildrenDoNotInheritRegisteredStaging) {
  const std::string marker = "phoenix staging, parent " + std::to_string(getpid());
  PinnedBuffer b = PinnedBuffer::staging(std::size_t{4} << 20);
  ASSERT_TRUE(b.registered());
  std::byte *tail = b.data() + b.size() - marker.size();
  std::memcpy(b.data(), marker.data(), marker.size());
  std::memcpy(tail, marker.data(), marker.size());
  ASSERT_TRUE(holds(b.data(), marker) && holds(tail, marker)) << "/proc/self/mem unreadable";
  const pid_t child = fork();
  ASSERT_NE(child, -1) << "fork failed";
  if (child == 0) {
    _exit(holds(b.data(), marker) || holds(tail, marker) ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child inherited the parent's staging";
}

}  // namespace
}  // namespace phx::test
