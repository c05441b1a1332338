// SPDX-License-Identifier: MIT
// The C API's reads through a descriptor opened with O_DIRECT follow the
// cache policy (PHX_READ_CACHE=auto, the default): a range the page cache
// holds is read from memory, any other range O_DIRECT; read_cache
// "descriptor" reads as the descriptor was opened.  The kernel tells what a
// read did (/proc/self/io read_bytes, mincore), not the library.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // setenv/unsetenv
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/options.hpp"
#include "io/residency.hpp"
#include "phoenix/phoenix.h"
#include "test_support.hpp"

namespace {

using phx::test::AlignedBuffer;
using phx::test::find_mismatch;
using phx::test::storage_read_bytes;
using phx::test::TempDir;

constexpr std::size_t kSize = std::size_t{4} << 20;
constexpr std::uint64_t kSeed = 23;
// Disk reads a read from memory may still cause: opening the buffered twin
// reads the file's inode block again where another process dropped the
// caches meanwhile (drop_caches=1 drops the block device's pages too).  A
// range read O_DIRECT instead reads all of its bytes, far more than this.
constexpr std::uint64_t kMetadataSlack = 16 << 10;

class CApiCachePolicy : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("PHX_READ_CACHE");
    phx::detail::refresh_default_options();
    phx::test::write_pattern_file(path_, kSize, kSeed);
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM), 0);
  }
  void TearDown() override {
    ::close(fd_);
    (void)phxfs_close(0);
    ::unsetenv("PHX_READ_CACHE");
    phx::detail::refresh_default_options();
  }

  void open_host(phxfs_read_cache_t cache) {
    phxfs_options_t options;
    ASSERT_EQ(phxfs_options_init(&options), 0) << phxfs_last_error();
    options.engine = PHXFS_ENGINE_HOST;
    options.read_cache = cache;
    ASSERT_EQ(phxfs_open_options(0, &options), 0) << phxfs_last_error();
    ASSERT_EQ(phxfs_regmem(0, mem_.data(), mem_.size(), &target_), 0) << phxfs_last_error();
  }

  void cache(bool all) {
    ASSERT_EQ(::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED), 0);
    if (all) {
      const int buffered = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(buffered, 0);
      std::vector<char> bytes(kSize);
      EXPECT_EQ(::pread(buffered, bytes.data(), kSize, 0), static_cast<ssize_t>(kSize));
      ::close(buffered);
    }
    ASSERT_EQ(phx::detail::mincore_fraction(fd_, 0, kSize), all ? 1.0 : 0.0);
  }

  // phxfs_read of [offset, offset + size) into the registration, checked
  // byte for byte; returns the bytes the block layer read meanwhile.
  std::uint64_t read_checked(std::uint64_t offset, std::size_t size, std::size_t buf_offset = 0) {
    std::memset(mem_.data(), 0, mem_.size());
    const std::uint64_t before = storage_read_bytes();
    EXPECT_EQ(phxfs_read({fd_, 0}, mem_.data(), static_cast<off_t>(buf_offset), size,
                         static_cast<off_t>(offset)),
              static_cast<ssize_t>(size))
        << phxfs_last_error();
    const std::uint64_t after = storage_read_bytes();
    EXPECT_EQ(find_mismatch({mem_.data() + buf_offset, size}, kSeed, offset), std::nullopt);
    return after - before;
  }

  TempDir dir_;
  std::filesystem::path path_ = dir_ / "kv";
  AlignedBuffer mem_{kSize + 8192};
  void *target_ = nullptr;
  int fd_ = -1;
};

TEST_F(CApiCachePolicy, ByDefaultACachedRangeIsReadFromMemory) {
  open_host(PHXFS_READ_CACHE_AUTO);
  cache(true);
  EXPECT_LT(read_checked(0, kSize), kMetadataSlack) << "a cached range was read from the disk";
  // Unaligned, which O_DIRECT would stage.
  EXPECT_LT(read_checked(12345, 100000, 7), kMetadataSlack);
}

TEST_F(CApiCachePolicy, ByDefaultAnUncachedRangeIsReadDirect) {
  open_host(PHXFS_READ_CACHE_AUTO);
  cache(false);
  EXPECT_GE(read_checked(0, kSize), kSize);
  EXPECT_EQ(phx::detail::mincore_fraction(fd_, 0, kSize), 0.0);
}

TEST_F(CApiCachePolicy, DescriptorModeReadsAsTheDescriptorWasOpened) {
  open_host(PHXFS_READ_CACHE_DESCRIPTOR);
  cache(true);
  EXPECT_GE(read_checked(0, kSize), kSize) << "O_DIRECT asked for, the page cache used";
}

TEST_F(CApiCachePolicy, TheEnvironmentSetsTheDefault) {
  ::setenv("PHX_READ_CACHE", "descriptor", 1);
  phx::detail::refresh_default_options();
  phxfs_options_t options;
  ASSERT_EQ(phxfs_options_init(&options), 0);
  EXPECT_EQ(options.read_cache, PHXFS_READ_CACHE_DESCRIPTOR);
  ::setenv("PHX_READ_CACHE", "sometimes", 1);
  phx::detail::refresh_default_options();
  errno = 0;
  EXPECT_EQ(phxfs_options_init(&options), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(phxfs_last_error()).find("PHX_READ_CACHE=sometimes"), std::string::npos)
      << phxfs_last_error();
}

TEST_F(CApiCachePolicy, OlderCallersAndBadValues) {
  phxfs_options_t options;
  ASSERT_EQ(phxfs_options_init(&options), 0);
  options.engine = PHXFS_ENGINE_HOST;
  // A caller built before read_cache: its size ends before the field.
  phxfs_options_t older = options;
  older.size = offsetof(phxfs_options_t, read_cache);
  older.read_cache = static_cast<phxfs_read_cache_t>(77);  // not part of its struct: ignored
  older.copy_spin_us = 99999;                              // nor this
  ASSERT_EQ(phxfs_open_options(0, &older), 0) << phxfs_last_error();
  ASSERT_EQ(phxfs_close(0), 0);
  options.copy_spin_us = 10001;
  errno = 0;
  EXPECT_EQ(phxfs_open_options(0, &options), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(phxfs_last_error()).find("copy_spin_us"), std::string::npos)
      << phxfs_last_error();
  options.copy_spin_us = 0;
  options.read_cache = static_cast<phxfs_read_cache_t>(77);
  errno = 0;
  EXPECT_EQ(phxfs_open_options(0, &options), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(std::string(phxfs_last_error()).find("read_cache 77"), std::string::npos)
      << phxfs_last_error();
}

}  // namespace
