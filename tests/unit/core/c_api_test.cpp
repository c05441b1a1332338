// SPDX-License-Identifier: MIT
// The C API: the paper's call sequence on the host engine, and every bad
// input giving -1, the documented errno and a message naming the call.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // setenv/unsetenv
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/options.hpp"
#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"
#include "phxfs_ioctl.h"
#include "test_support.hpp"

namespace {

using phx::test::AlignedBuffer;
using phx::test::find_mismatch;
using phx::test::TempDir;

// Expects -1/errno err, and a last-error message containing needle.
#define EXPECT_C_ERROR(call, err, needle)                                      \
  do {                                                                         \
    errno = 0;                                                                 \
    EXPECT_EQ((call), -1);                                                     \
    EXPECT_EQ(errno, (err)) << std::strerror(errno);                           \
    EXPECT_NE(std::string(phxfs_last_error()).find(needle), std::string::npos) \
        << phxfs_last_error();                                                 \
  } while (0)

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("PHX_ENGINE");
    phx::detail::refresh_default_options();
    ASSERT_EQ(phxfs_open_engine(0, PHXFS_ENGINE_HOST), 0) << phxfs_last_error();
    phx::test::write_pattern_file(dir_ / "f", 1 << 20, 42);
    fd_ = ::open((dir_ / "f").c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    ::close(fd_);
    (void)phxfs_close(0);
    ::unsetenv("PHX_ENGINE");
    phx::detail::refresh_default_options();
  }
  TempDir dir_;
  int fd_ = -1;
};

// The paper's example: open, register, read through the target, deregister.
TEST_F(CApi, PaperSequenceReadsTheFile) {
  AlignedBuffer mem(1 << 20);
  void *target = nullptr;
  ASSERT_EQ(phxfs_regmem(0, mem.data(), mem.size(), &target), 0) << phxfs_last_error();
  EXPECT_EQ(target, mem.data());  // host engine: the view is the memory
  EXPECT_EQ(phxfs_device_engine(0), PHXFS_ENGINE_HOST);
  const phxfs_fileid_t fid{fd_, 0};
  EXPECT_EQ(phxfs_read(fid, mem.data(), 0, 1 << 20, 0), 1 << 20);
  EXPECT_EQ(find_mismatch(mem.span(), 42, 0), std::nullopt);
  // Any address inside the registration, unaligned offsets and sizes.
  std::memset(mem.data(), 0, mem.size());
  EXPECT_EQ(phxfs_read(fid, mem.data(), 4097, 5000, 12345), 5000);
  EXPECT_EQ(find_mismatch({mem.data() + 4097, 5000}, 42, 12345), std::nullopt);
  EXPECT_EQ(phxfs_read(fid, mem.data() + 100, 1, 10, 0), 10);
  EXPECT_EQ(find_mismatch({mem.data() + 101, 10}, 42, 0), std::nullopt);
  // End of file.
  EXPECT_EQ(phxfs_read(fid, mem.data(), 0, 8192, (1 << 20) - 100), 100);
  EXPECT_EQ(phxfs_read(fid, mem.data(), 0, 8192, 1 << 20), 0);
  EXPECT_EQ(phxfs_read(fid, mem.data(), 0, 0, 0), 0);
  EXPECT_EQ(phxfs_deregmem(0, mem.data(), mem.size()), 0);
}

TEST_F(CApi, WriteThenReadBack) {
  AlignedBuffer out(256 << 10);
  AlignedBuffer in(256 << 10);
  phx::test::fill_pattern(out.span(), 77, 0);
  void *t1 = nullptr;
  void *t2 = nullptr;
  ASSERT_EQ(phxfs_regmem(0, out.data(), out.size(), &t1), 0);
  ASSERT_EQ(phxfs_regmem(0, in.data(), in.size(), &t2), 0);
  const phxfs_fileid_t fid{fd_, 0};
  EXPECT_EQ(phxfs_write(fid, out.data(), 3, out.size() - 3, 1001), out.size() - 3);
  EXPECT_EQ(phxfs_read(fid, in.data(), 3, in.size() - 3, 1001), in.size() - 3);
  EXPECT_EQ(std::memcmp(in.data() + 3, out.data() + 3, in.size() - 3), 0);
  // The bytes around the write are the file's old ones.
  const auto file = phx::test::read_whole_file(dir_ / "f");
  EXPECT_EQ(find_mismatch({file.data(), 1001}, 42, 0), std::nullopt);
  EXPECT_EQ(std::memcmp(file.data() + 1001, out.data() + 3, out.size() - 3), 0);
  const std::size_t after = 1001 + out.size() - 3;
  EXPECT_EQ(find_mismatch({file.data() + after, file.size() - after}, 42, after), std::nullopt);
}

TEST(CApiDevice, BadDeviceIds) {
  EXPECT_C_ERROR(phxfs_open(-1), EINVAL, "device id -1");
  EXPECT_C_ERROR(phxfs_open(static_cast<int>(PHXFS_MAX_DEVICES)), EINVAL, "out of range");
  EXPECT_C_ERROR(phxfs_close(-5), EINVAL, "device id -5");
  void *t = nullptr;
  int x = 0;
  EXPECT_C_ERROR(phxfs_regmem(1000, &x, 4, &t), EINVAL, "out of range");
}

TEST(CApiDevice, ClosedDeviceIsEnodev) {
  int x = 0;
  void *t = nullptr;
  EXPECT_C_ERROR(phxfs_close(3), ENODEV, "not open");
  EXPECT_C_ERROR(phxfs_regmem(3, &x, sizeof(x), &t), ENODEV, "not open");
  EXPECT_C_ERROR(phxfs_deregmem(3, &x, sizeof(x)), ENODEV, "not open");
  EXPECT_C_ERROR(phxfs_read(phxfs_fileid_t{0, 3}, &x, 0, 1, 0), ENODEV, "not open");
  EXPECT_C_ERROR(phxfs_write(phxfs_fileid_t{0, 3}, &x, 0, 1, 0), ENODEV, "not open");
  EXPECT_EQ(phxfs_device_engine(3), PHXFS_ENGINE_ERROR);
  EXPECT_EQ(errno, ENODEV);
}

TEST(CApiDevice, OpenIsReferenceCountedAndCloseDropsRegistrations) {
  ASSERT_EQ(phxfs_open_engine(2, PHXFS_ENGINE_HOST), 0);
  ASSERT_EQ(phxfs_open(2), 0);  // auto joins the engine in use
  EXPECT_C_ERROR(phxfs_open_engine(2, PHXFS_ENGINE_DIRECT), EBUSY, "already open");
  int x = 0;
  void *t = nullptr;
  ASSERT_EQ(phxfs_regmem(2, &x, sizeof(x), &t), 0);
  EXPECT_EQ(phxfs_close(2), 0);  // still open once
  EXPECT_C_ERROR(phxfs_regmem(2, &x, sizeof(x), &t), EEXIST, "already registered");
  EXPECT_EQ(phxfs_close(2), 0);
  EXPECT_C_ERROR(phxfs_close(2), ENODEV, "not open");
  // Reopened: the old registration is gone.
  ASSERT_EQ(phxfs_open_engine(2, PHXFS_ENGINE_HOST), 0);
  EXPECT_EQ(phxfs_regmem(2, &x, sizeof(x), &t), 0);
  EXPECT_EQ(phxfs_close(2), 0);
}

TEST_F(CApi, RegmemBadArguments) {
  AlignedBuffer mem(65536);
  void *t = nullptr;
  EXPECT_C_ERROR(phxfs_regmem(0, nullptr, 4096, &t), EINVAL, "null address");
  EXPECT_C_ERROR(phxfs_regmem(0, mem.data(), 4096, nullptr), EINVAL, "null target_addr");
  EXPECT_C_ERROR(phxfs_regmem(0, mem.data(), 0, &t), EINVAL, "zero length");
  EXPECT_C_ERROR(phxfs_regmem(0, reinterpret_cast<void *>(UINTPTR_MAX - 100), 4096, &t), EINVAL,
                 "wraps");
  ASSERT_EQ(phxfs_regmem(0, mem.data(), 8192, &t), 0);
  EXPECT_C_ERROR(phxfs_regmem(0, mem.data(), 8192, &t), EEXIST, "already registered");
  EXPECT_C_ERROR(phxfs_regmem(0, mem.data() + 4096, 8192, &t), EINVAL, "overlaps");
  EXPECT_C_ERROR(phxfs_regmem(0, mem.data(), 4096, &t), EINVAL, "overlaps");
  EXPECT_EQ(phxfs_regmem(0, mem.data() + 8192, 4096, &t), 0);  // adjacent is fine
}

// The host engine copies into registered memory: a range that is not
// mapped (a stray pointer, or GPU memory without the direct engine) is
// refused when registered instead of crashing a later read.
TEST_F(CApi, RegmemOfUnmappedMemoryIsEfault) {
  void *t = nullptr;
  // Below mmap_min_addr nothing can be mapped.
  EXPECT_C_ERROR(phxfs_regmem(0, reinterpret_cast<void *>(0x1000), 4096, &t), EFAULT,
                 "not mapped host memory");
  // A page followed by a hole.  The pair is placed at a fixed address far
  // from where the kernel and the sanitizers' allocators put mappings, so
  // nothing fills the hole while the test runs.
  std::byte *page = nullptr;
#if defined(__SANITIZE_THREAD__)
  // TSan allows application mappings only in its app ranges; it rewrites
  // any other hint to 0, where root may map, and then aborts.
  const auto hints = {0x007000000000ULL, 0x006000000000ULL, 0x567000000000ULL};
#else
  const auto hints = {0x3e0000000000ULL, 0x2e0000000000ULL, 0x5e0000000000ULL};
#endif
  for (std::uintptr_t hint : hints) {
    void *p = ::mmap(reinterpret_cast<void *>(hint), 2 * 4096, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED) {
      page = static_cast<std::byte *>(p);
      break;
    }
  }
  if (page == nullptr) {
    GTEST_SKIP() << "no free fixed address for the hole: " << std::strerror(errno);
  }
  ASSERT_EQ(::munmap(page + 4096, 4096), 0);
  EXPECT_C_ERROR(phxfs_regmem(0, page, 2 * 4096, &t), EFAULT, "not mapped host memory");
  EXPECT_C_ERROR(phxfs_regmem(0, page + 4095, 2, &t), EFAULT, "not mapped host memory");
  EXPECT_EQ(phxfs_regmem(0, page + 100, 3996, &t), 0);  // the failed attempts left no claim
  EXPECT_EQ(phxfs_deregmem(0, page + 100, 3996), 0);
  ::munmap(page, 4096);
}

TEST_F(CApi, DeregmemUnknownRangeIsEinval) {
  AlignedBuffer mem(65536);
  void *t = nullptr;
  EXPECT_C_ERROR(phxfs_deregmem(0, mem.data(), 4096), EINVAL, "not registered");
  ASSERT_EQ(phxfs_regmem(0, mem.data(), 8192, &t), 0);
  EXPECT_C_ERROR(phxfs_deregmem(0, mem.data(), 4096), EINVAL, "not registered");
  EXPECT_C_ERROR(phxfs_deregmem(0, mem.data() + 4096, 4096), EINVAL, "not registered");
  EXPECT_EQ(phxfs_deregmem(0, mem.data(), 8192), 0);
  EXPECT_C_ERROR(phxfs_deregmem(0, mem.data(), 8192), EINVAL, "not registered");
}

TEST_F(CApi, ReadBadArguments) {
  AlignedBuffer mem(65536);
  void *t = nullptr;
  ASSERT_EQ(phxfs_regmem(0, mem.data(), 8192, &t), 0);
  const phxfs_fileid_t fid{fd_, 0};
  EXPECT_C_ERROR(phxfs_read(fid, nullptr, 0, 10, 0), EINVAL, "null buffer");
  EXPECT_C_ERROR(phxfs_read(fid, mem.data(), -1, 10, 0), EINVAL, "negative offset");
  EXPECT_C_ERROR(phxfs_read(fid, mem.data(), 0, 10, -4096), EINVAL, "negative offset");
  EXPECT_C_ERROR(phxfs_read(fid, mem.data(), 0, SIZE_MAX, 0), EINVAL, "size too large");
  EXPECT_C_ERROR(phxfs_read(phxfs_fileid_t{-1, 0}, mem.data(), 0, 10, 0), EBADF,
                 "bad file descriptor");
  EXPECT_C_ERROR(phxfs_read(fid, mem.data(), 8000, 4096, 0), EFAULT, "not inside one registration");
  EXPECT_C_ERROR(phxfs_read(fid, mem.data() + 8192, 0, 1, 0), EFAULT, "not inside");
  EXPECT_C_ERROR(phxfs_read(fid, mem.data() - 1, 0, 1, 0), EFAULT, "not inside");
  // A descriptor that is not open: the kernel's EBADF, and the file untouched.
  EXPECT_C_ERROR(phxfs_read(phxfs_fileid_t{9999, 0}, mem.data(), 0, 4096, 0), EBADF, "fd 9999");
  EXPECT_C_ERROR(phxfs_read(phxfs_fileid_t{9999, 0}, mem.data(), 1, 10, 3), EBADF, "fd 9999");
}

TEST_F(CApi, WriteToReadOnlyDescriptorLosesNothing) {
  AlignedBuffer mem(8192);
  void *t = nullptr;
  ASSERT_EQ(phxfs_regmem(0, mem.data(), mem.size(), &t), 0);
  const int ro = ::open((dir_ / "f").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ro, 0);
  EXPECT_C_ERROR(phxfs_write(phxfs_fileid_t{ro, 0}, mem.data(), 0, 4096, 0), EBADF, "phxfs_write");
  EXPECT_C_ERROR(phxfs_write(phxfs_fileid_t{ro, 0}, mem.data(), 1, 100, 7), EBADF, "offset 7");
  ::close(ro);
  EXPECT_EQ(find_mismatch(phx::test::read_whole_file(dir_ / "f"), 42, 0), std::nullopt);
}

TEST_F(CApi, DeregisteredMemoryCannotBeUsed) {
  AlignedBuffer mem(8192);
  void *t = nullptr;
  ASSERT_EQ(phxfs_regmem(0, mem.data(), mem.size(), &t), 0);
  ASSERT_EQ(phxfs_deregmem(0, mem.data(), mem.size()), 0);
  EXPECT_C_ERROR(phxfs_read(phxfs_fileid_t{fd_, 0}, mem.data(), 0, 4096, 0), EFAULT, "not inside");
}

TEST(CApiEngine, EnvironmentSelectsTheEngine) {
  ::setenv("PHX_ENGINE", "host", 1);
  phx::detail::refresh_default_options();
  ASSERT_EQ(phxfs_open(4), 0) << phxfs_last_error();
  EXPECT_EQ(phxfs_device_engine(4), PHXFS_ENGINE_HOST);
  EXPECT_EQ(phxfs_close(4), 0);
  ::setenv("PHX_ENGINE", "warp-drive", 1);
  phx::detail::refresh_default_options();
  EXPECT_C_ERROR(phxfs_open(4), EINVAL, "warp-drive");
  ::unsetenv("PHX_ENGINE");
  phx::detail::refresh_default_options();
}

TEST(CApiEngine, DirectWithoutTheModuleIsEnodev) {
  if (::access("/dev/phxfs_dev5", F_OK) == 0) {
    GTEST_SKIP() << "phxfs is loaded on this machine";
  }
  EXPECT_C_ERROR(phxfs_open_engine(5, PHXFS_ENGINE_DIRECT), ENODEV, "/dev/phxfs_dev5");
  ::setenv("PHX_ENGINE", "direct", 1);
  phx::detail::refresh_default_options();
  EXPECT_C_ERROR(phxfs_open(5), ENODEV, "phxfs module loaded");
  ::unsetenv("PHX_ENGINE");
  phx::detail::refresh_default_options();
  // auto falls back to host without the module.
  ASSERT_EQ(phxfs_open(5), 0);
  EXPECT_EQ(phxfs_device_engine(5), PHXFS_ENGINE_HOST);
  EXPECT_EQ(phxfs_close(5), 0);
}

TEST(CApiEngine, CompatNeedsCudaAndAGpu) {
#if PHX_WITH_CUDA
  // Device 6 has no GPU here (the GPU suite covers devices that have one).
  if (phx::choose_engine(6).engine == phx::Engine::compat) {
    GTEST_SKIP() << "this machine has a GPU for device 6";
  }
  EXPECT_C_ERROR(phxfs_open_engine(6, PHXFS_ENGINE_COMPAT), ENODEV, "device 6");
#else
  EXPECT_C_ERROR(phxfs_open_engine(6, PHXFS_ENGINE_COMPAT), ENOTSUP, "compat");
  EXPECT_C_ERROR(phxfs_open_engine(6, PHXFS_ENGINE_CUFILE), ENOTSUP, "cufile");
#endif
  EXPECT_C_ERROR(phxfs_open_engine(6, static_cast<phxfs_engine_t>(42)), EINVAL, "unknown engine");
}

// Stream-ordered I/O needs CUDA; the GPU suite tests it where there is a GPU.
TEST_F(CApi, StreamOrderedIoWithoutCudaIsEnotsup) {
  if (void *cuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); cuda != nullptr) {
    ::dlclose(cuda);
    GTEST_SKIP() << "a CUDA driver is installed: tests/gpu covers stream-ordered I/O";
  }
  AlignedBuffer mem(1 << 20);
  void *target = nullptr;
  ASSERT_EQ(phxfs_regmem(0, mem.data(), mem.size(), &target), 0) << phxfs_last_error();
  ssize_t done = -7;
  EXPECT_C_ERROR(phxfs_read_async({fd_, 0}, mem.data(), 4096, 0, &done, nullptr), ENOTSUP, "CUDA");
  EXPECT_C_ERROR(phxfs_write_async({fd_, 0}, mem.data(), 4096, 0, &done, nullptr), ENOTSUP, "CUDA");
  EXPECT_EQ(done, -7);  // nothing was enqueued
  // Argument checks come first, as for phxfs_read.
  EXPECT_C_ERROR(phxfs_read_async({fd_, 0}, nullptr, 4096, 0, &done, nullptr), EINVAL, "null");
  EXPECT_EQ(phxfs_deregmem(0, mem.data(), mem.size()), 0);
}

TEST(CApiDiagnostics, StrerrorAndNames) {
  EXPECT_NE(std::string(phxfs_strerror(ENODEV)).find("not open"), std::string::npos);
  EXPECT_NE(std::string(phxfs_strerror(EFAULT)).find("registration"), std::string::npos);
  EXPECT_STREQ(phxfs_strerror(ENOENT), "No such file or directory");
  EXPECT_STREQ(phxfs_engine_name(PHXFS_ENGINE_DIRECT), "direct");
  EXPECT_STREQ(phxfs_engine_name(PHXFS_ENGINE_CUFILE), "cufile");
  EXPECT_STREQ(phxfs_engine_name(static_cast<phxfs_engine_t>(99)), "unknown");
  EXPECT_STREQ(phxfs_version(), PHOENIX_VERSION_STRING);
  // Success clears the message.
  EXPECT_EQ(phxfs_close(-1), -1);
  EXPECT_STRNE(phxfs_last_error(), "");
  ASSERT_EQ(phxfs_open_engine(7, PHXFS_ENGINE_HOST), 0);
  EXPECT_STREQ(phxfs_last_error(), "");
  EXPECT_EQ(phxfs_close(7), 0);
}

}  // namespace

namespace {

// POSIX short-count convention: progress first, the error on the next call;
// what was reported written is in the file.
TEST(CApiFull, WriteReportsProgressThenTheError) {
  std::string why;
  auto mnt = phx::test::ScratchMount::make("tmpfs", "size=1m", why);
  if (!mnt) {
    GTEST_SKIP() << why;
  }
  ASSERT_EQ(phxfs_open_engine(8, PHXFS_ENGINE_HOST), 0);
  AlignedBuffer mem(3 << 20);
  phx::test::fill_pattern(mem.span(), 10, 0);
  void *t = nullptr;
  ASSERT_EQ(phxfs_regmem(8, mem.data(), mem.size(), &t), 0);
  const auto path = mnt->path() / "f";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  const ssize_t first = phxfs_write(phxfs_fileid_t{fd, 8}, mem.data(), 0, mem.size(), 0);
  EXPECT_GT(first, 0);
  EXPECT_LT(first, static_cast<ssize_t>(mem.size()));
  EXPECT_NE(std::string(phxfs_last_error()).find("stopped after"), std::string::npos);
  EXPECT_C_ERROR(phxfs_write(phxfs_fileid_t{fd, 8}, mem.data(), first, mem.size() - first, first),
                 ENOSPC, "phxfs_write");
  ::close(fd);
  const auto data = phx::test::read_whole_file(path);
  ASSERT_GE(data.size(), static_cast<std::size_t>(first));
  EXPECT_EQ(find_mismatch({data.data(), static_cast<std::size_t>(first)}, 10, 0), std::nullopt);
  EXPECT_EQ(phxfs_close(8), 0);
}

}  // namespace

namespace {

TEST(CApiOptions, InitGivesTheProcessDefaults) {
  ::setenv("PHX_QUEUE_DEPTH", "64", 1);
  ::setenv("PHX_ENGINE", "host", 1);
  phx::detail::refresh_default_options();
  phxfs_options_t o;
  ASSERT_EQ(phxfs_options_init(&o), 0) << phxfs_last_error();
  EXPECT_EQ(o.size, sizeof(phxfs_options_t));
  EXPECT_EQ(o.engine, PHXFS_ENGINE_HOST);
  EXPECT_EQ(o.queue_depth, 64U);
  EXPECT_EQ(o.staging_bytes, phx::Options{}.staging_bytes);
  EXPECT_EQ(o.copy_threads, phx::Options{}.copy_threads);
  EXPECT_EQ(o.stream_staging_bytes, phx::Options{}.stream_staging_bytes);
  ::unsetenv("PHX_QUEUE_DEPTH");
  ::unsetenv("PHX_ENGINE");
  phx::detail::refresh_default_options();
  EXPECT_C_ERROR(phxfs_options_init(nullptr), EINVAL, "null options");
}

TEST(CApiOptions, OpenWithOptionsSharesOnlyTheSameOptions) {
  phxfs_options_t o;
  ASSERT_EQ(phxfs_options_init(&o), 0);
  o.engine = PHXFS_ENGINE_HOST;
  o.staging_bytes = 64 << 10;
  ASSERT_EQ(phxfs_open_options(6, &o), 0) << phxfs_last_error();
  EXPECT_EQ(phxfs_open_options(6, &o), 0) << phxfs_last_error();
  o.engine = PHXFS_ENGINE_AUTO;  // any engine: still the same options
  EXPECT_EQ(phxfs_open_options(6, &o), 0) << phxfs_last_error();
  o.staging_bytes = 128 << 10;
  EXPECT_C_ERROR(phxfs_open_options(6, &o), EBUSY, "other options");
  // phxfs_open shares the device as it is.
  EXPECT_EQ(phxfs_open(6), 0) << phxfs_last_error();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(phxfs_close(6), 0);
  }
  EXPECT_C_ERROR(phxfs_close(6), ENODEV, "not open");
}

TEST(CApiOptions, BadOptionsAreEinvalNamingTheField) {
  phxfs_options_t o;
  ASSERT_EQ(phxfs_options_init(&o), 0);
  o.engine = PHXFS_ENGINE_HOST;
  o.queue_depth = 0;
  EXPECT_C_ERROR(phxfs_open_options(7, &o), EINVAL, "queue_depth");
  ASSERT_EQ(phxfs_options_init(&o), 0);
  o.copy_chunk = 1;
  EXPECT_C_ERROR(phxfs_open_options(7, &o), EINVAL, "copy_chunk");
  ASSERT_EQ(phxfs_options_init(&o), 0);
  o.size = sizeof(o) + 8;
  EXPECT_C_ERROR(phxfs_open_options(7, &o), EINVAL, "phxfs_options_init");
  EXPECT_C_ERROR(phxfs_open_options(7, nullptr), EINVAL, "null options");
  EXPECT_C_ERROR(phxfs_close(7), ENODEV, "not open");  // nothing was left open
}

}  // namespace
