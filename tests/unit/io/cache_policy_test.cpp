// SPDX-License-Identifier: MIT
// File's default cache policy (DirectIo::automatic): each read goes through
// the page cache when it holds the range and O_DIRECT when it does not;
// writes stay O_DIRECT and the two descriptors never disagree on the bytes.
// What a read did is told by the kernel, not by the library: the bytes this
// process made the block layer read (/proc/self/io read_bytes) and what the
// page cache holds afterwards.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/residency.hpp"
#include "phoenix/phoenix.hpp"
#include "test_support.hpp"

namespace phx {
namespace {

using test::find_mismatch;
using test::TempDir;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kSeed = 11;
// What a read served from the page cache may still make the block layer
// read: a filesystem metadata block, or a page reclaimed while the parallel
// suite presses on memory (seen once in CI: 4096 bytes). An O_DIRECT read of
// the same range reads all of it, at least 1 MiB in every case below.
constexpr std::uint64_t kFromMemorySlack = 64 * 1024;

using test::storage_read_bytes;

class CachePolicy : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_pattern_file(path_, size_, kSeed);  // fsynced: its pages can be dropped
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM), 0);
  }
  void TearDown() override {
    if (fd_ >= 0) {
      (void)::close(fd_);
    }
  }

  // The page cache holds [offset, offset + length) and nothing else.
  void cache_only(std::uint64_t offset, std::uint64_t length) {
    ASSERT_EQ(::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED), 0);
    if (length == 0) {
      ASSERT_EQ(detail::mincore_fraction(fd_, 0, size_), 0.0)
          << "POSIX_FADV_DONTNEED did not evict";
      return;
    }
    std::vector<char> buffer(length);
    ASSERT_EQ(::pread(fd_, buffer.data(), length, static_cast<off_t>(offset)),
              static_cast<ssize_t>(length));
    ASSERT_EQ(detail::mincore_fraction(fd_, offset, length), 1.0);
    if (offset + length < size_) {
      ASSERT_EQ(detail::mincore_fraction(fd_, offset + length, size_ - offset - length), 0.0);
    }
  }

  // Reads the range through @p file, checks every byte, and returns the
  // bytes the block layer read meanwhile.
  std::uint64_t read_checked(File &file, std::uint64_t offset, std::size_t length) {
    std::vector<std::byte> out(length);
    const std::uint64_t before = storage_read_bytes();
    EXPECT_EQ(file.read(out, offset), length);
    const std::uint64_t after = storage_read_bytes();
    const auto bad = find_mismatch(out, kSeed, offset);
    EXPECT_FALSE(bad.has_value()) << "byte " << bad.value_or(0) << " of " << offset << " + "
                                  << length;
    return after - before;
  }

  TempDir dir_;
  std::filesystem::path path_ = dir_ / "weights";
  std::uint64_t size_ = 8 * kMiB;
  int fd_ = -1;
};

TEST_F(CachePolicy, ACachedRangeIsReadFromThePageCache) {
  cache_only(0, size_);
  File file(path_, O_RDONLY);
  ASSERT_TRUE(file.direct_io()) << "the test needs a filesystem with O_DIRECT";
  EXPECT_TRUE(file.reads_buffered(0, size_));
  EXPECT_LE(read_checked(file, 0, size_), kFromMemorySlack)
      << "the default read a cached file from the disk";
  // Unaligned at both ends, as through the page cache any read may be.
  EXPECT_LE(read_checked(file, 4097, 3 * kMiB + 11), kFromMemorySlack);
  // The control: O_DIRECT by request reads the same cached range from the
  // disk, so the counter above would have moved had the default done so.
  File direct(path_, O_RDONLY, 0644, DirectIo::preferred);
  EXPECT_FALSE(direct.reads_buffered(0, size_));
  EXPECT_GE(read_checked(direct, 0, size_), size_);
}

TEST_F(CachePolicy, AnUncachedRangeIsReadDirectAndStaysUncached) {
  cache_only(0, 0);
  File file(path_, O_RDONLY);
  ASSERT_TRUE(file.direct_io());
  EXPECT_FALSE(file.reads_buffered(0, size_));
  EXPECT_GE(read_checked(file, 0, size_), size_);
  EXPECT_EQ(detail::mincore_fraction(fd_, 0, size_), 0.0)
      << "the default read an uncached file through the page cache";
  // The control: DirectIo::off fills the page cache.
  File buffered(path_, O_RDONLY, 0644, DirectIo::off);
  EXPECT_TRUE(buffered.reads_buffered(0, size_));
  (void)read_checked(buffered, 0, size_);
  EXPECT_EQ(detail::mincore_fraction(fd_, 0, size_), 1.0);
}

TEST_F(CachePolicy, EachReadIsDecidedForItsOwnRange) {
  cache_only(0, size_ / 2);
  File file(path_, O_RDONLY);
  EXPECT_LE(read_checked(file, 0, size_ / 2), kFromMemorySlack);
  EXPECT_GE(read_checked(file, size_ / 2, size_ / 2), size_ / 2);
  EXPECT_EQ(detail::mincore_fraction(fd_, size_ / 2, size_ / 2), 0.0);
  // A read mostly (3 of 4 pages) cached goes through the page cache, and
  // the kernel reads the one page it lacks.
  cache_only(0, 3 * 4096);
  EXPECT_TRUE(file.reads_buffered(0, 4 * 4096));
  EXPECT_LE(read_checked(file, 0, 4 * 4096), 4096U);
  // One of four is not enough.
  cache_only(0, 4096);
  EXPECT_FALSE(file.reads_buffered(0, 4 * 4096));
}

TEST_F(CachePolicy, WritesAndBothDescriptorsAgreeOnTheBytes) {
  File file(path_, O_RDWR);
  cache_only(0, size_);
  // An O_DIRECT write over cached pages: the kernel drops them, so the next
  // read of the range goes to the disk and finds the new bytes.
  std::vector<std::byte> fresh(kMiB);
  test::fill_pattern(fresh, kSeed + 1, 0);
  EXPECT_EQ(file.write(fresh, kMiB), kMiB);
  std::vector<std::byte> back(kMiB);
  EXPECT_EQ(file.read(back, kMiB), kMiB);
  EXPECT_EQ(back, fresh);
  // The untouched cached rest still reads from memory, and right.
  EXPECT_LE(read_checked(file, 2 * kMiB, size_ - 2 * kMiB), kFromMemorySlack);
}

TEST_F(CachePolicy, ExplicitModesAreKept) {
  cache_only(0, size_);
  const File preferred(path_, O_RDONLY, 0644, DirectIo::preferred);
  const File required(path_, O_RDONLY, 0644, DirectIo::required);
  const File off(path_, O_RDONLY, 0644, DirectIo::off);
  EXPECT_FALSE(preferred.reads_buffered(0, size_));
  EXPECT_FALSE(required.reads_buffered(0, size_));
  EXPECT_TRUE(off.reads_buffered(0, size_));
  // A write-only file has no reads to decide.
  const File write_only(dir_ / "out", O_WRONLY | O_CREAT, 0644);
  EXPECT_FALSE(write_only.reads_buffered(0, 4096));
}

TEST_F(CachePolicy, TheFileIsStillReadAfterItsPathIsGone) {
  File file(path_, O_RDONLY);
  cache_only(0, size_);
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  EXPECT_LE(read_checked(file, 0, size_), kFromMemorySlack);
  File moved(std::move(file));
  EXPECT_LE(read_checked(moved, kMiB, kMiB), kFromMemorySlack);
}

}  // namespace
}  // namespace phx
