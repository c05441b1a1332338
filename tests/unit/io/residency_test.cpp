// SPDX-License-Identifier: MIT
// The page-cache residency estimate that picks buffered reads or O_DIRECT
// for CachePolicy::automatic: exact on small ranges, sampled on large ones,
// and in both cases close to what mincore says page by page.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/residency.hpp"
#include "test_support.hpp"

namespace {

using phx::detail::resident_fraction;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// The reference: every page of the range asked of mincore.
double exact_fraction(int fd, std::uint64_t offset, std::uint64_t length) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t begin = offset / page * page;
  const std::uint64_t span = offset + length - begin;
  void *map = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(begin));
  if (map == MAP_FAILED) {
    ADD_FAILURE() << "mmap failed";
    return -1;
  }
  std::vector<unsigned char> flags((span + page - 1) / page);
  EXPECT_EQ(::mincore(map, span, flags.data()), 0);
  (void)::munmap(map, span);
  std::uint64_t resident = 0;
  for (const unsigned char f : flags) {
    resident += f & 1U;
  }
  return static_cast<double>(resident) / static_cast<double>(flags.size());
}

class Residency : public ::testing::Test {
 protected:
  // Cached runs of the file, the rest evicted: @p cached(offset) says which.
  void lay_out(std::uint64_t run, const std::function<bool(std::uint64_t)> &cached) {
    ASSERT_EQ(::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED), 0);
    std::vector<char> buffer(run);
    for (std::uint64_t at = 0; at < size_; at += run) {
      if (cached(at)) {
        ASSERT_EQ(::pread(fd_, buffer.data(), run, static_cast<off_t>(at)),
                  static_cast<ssize_t>(run));
      }
    }
  }

  void SetUp() override {
    phx::test::write_pattern_file(path_, size_, 7);  // fsynced: its pages can be dropped
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
    // Readahead would cache more than each case reads.
    ASSERT_EQ(::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM), 0);
  }

  void TearDown() override {
    if (fd_ >= 0) {
      (void)::close(fd_);
    }
  }

  void expect_close(std::uint64_t offset, std::uint64_t length, double tolerance) {
    const double exact = exact_fraction(fd_, offset, length);
    const double estimate = resident_fraction(fd_, offset, length);
    EXPECT_NEAR(estimate, exact, tolerance) << "range " << offset << " + " << length;
  }

  phx::test::TempDir dir_;
  std::filesystem::path path_ = dir_ / "weights";
  std::uint64_t size_ = 160 * kMiB;  // 40960 pages: past the exact limit
  int fd_ = -1;
};

TEST_F(Residency, NothingCachedReadsAsZeroAndEverythingAsOne) {
  lay_out(kMiB, [](std::uint64_t) { return false; });
  ASSERT_LT(exact_fraction(fd_, 0, size_), 0.01) << "POSIX_FADV_DONTNEED did not evict";
  EXPECT_EQ(resident_fraction(fd_, 0, size_), 0.0);
  // Not exactly 1: under memory pressure (CI runs tests side by side, and
  // a machine may reclaim cold pages on its own, as DAMON does) the kernel
  // may drop a page it just read, and a sampled page then counts.  The
  // layout is made again when more than 1% went while it was measured.
  double estimate = -1;
  double before = 0;
  double after = 0;
  for (int attempt = 0; attempt < 3 && (before <= 0.99 || after <= 0.99); ++attempt) {
    lay_out(kMiB, [](std::uint64_t) { return true; });
    before = exact_fraction(fd_, 0, size_);
    estimate = resident_fraction(fd_, 0, size_);
    after = exact_fraction(fd_, 0, size_);
  }
  ASSERT_GT(std::min(before, after), 0.99)
      << "the pages read did not stay cached, three times: " << before << " then " << after;
  EXPECT_GE(estimate, 0.99);
}

TEST_F(Residency, SampledEstimateFollowsHalves) {
  lay_out(kMiB, [this](std::uint64_t at) { return at < size_ / 2; });
  ASSERT_NEAR(exact_fraction(fd_, 0, size_), 0.5, 0.01);
  expect_close(0, size_, 0.06);
  // Subranges, unaligned at both ends: all cached, then all evicted.
  EXPECT_EQ(resident_fraction(fd_, 100, size_ / 2 - 200), 1.0);
  EXPECT_EQ(resident_fraction(fd_, size_ / 2 + 100, size_ / 2 - 200), 0.0);
}

TEST_F(Residency, PeriodicLayoutsDoNotAliasWithTheSamples) {
  // A stride sampler with one sample per 40 pages would see 160 KiB runs
  // as all cached or all evicted.
  for (const std::uint64_t run : {std::uint64_t{4096}, 160 * std::uint64_t{1024}, kMiB}) {
    lay_out(run, [run](std::uint64_t at) { return (at / run) % 2 == 0; });
    const double exact = exact_fraction(fd_, 0, size_);
    ASSERT_NEAR(exact, 0.5, 0.01) << "run " << run;
    expect_close(0, size_, 0.06);
  }
}

TEST_F(Residency, SmallRangesAreCountedExactly) {
  lay_out(4096, [](std::uint64_t at) { return (at / 4096) % 3 == 0; });
  const std::uint64_t length = 48 * kMiB;  // 12288 pages: under the exact limit
  EXPECT_DOUBLE_EQ(resident_fraction(fd_, 0, length), exact_fraction(fd_, 0, length));
}

// Small ranges are counted by cachestat(2) where the kernel has it and by
// mincore(2) elsewhere (Linux 6.1): both must give the exact answer.
TEST_F(Residency, BothCountersAgreeWithMincorePageByPage) {
  lay_out(4096, [](std::uint64_t at) { return (at / 4096) % 3 == 0; });
  struct Range {
    std::uint64_t offset;
    std::uint64_t length;
  };
  for (const Range r : {Range{0, 4096}, Range{4096, 4096}, Range{100, 3 * 4096},
                        Range{5000, 64 * 1024 + 7}, Range{kMiB + 1, 16 * kMiB}}) {
    const double exact = exact_fraction(fd_, r.offset, r.length);
    EXPECT_DOUBLE_EQ(resident_fraction(fd_, r.offset, r.length), exact)
        << "range " << r.offset << " + " << r.length;
    EXPECT_DOUBLE_EQ(phx::detail::mincore_fraction(fd_, r.offset, r.length), exact)
        << "range " << r.offset << " + " << r.length;
  }
  // The policy's line: two of three pages evicted reads O_DIRECT, a range
  // whose every page is cached reads buffered.
  EXPECT_FALSE(phx::detail::read_buffered(fd_, 0, 3 * 4096));
  EXPECT_TRUE(phx::detail::read_buffered(fd_, 3 * 4096, 4096));
}

TEST_F(Residency, UnknowableRangesReadAsZero) {
  EXPECT_EQ(resident_fraction(fd_, 0, 0), 0.0);
  EXPECT_EQ(resident_fraction(-1, 0, size_), 0.0);
}

}  // namespace
