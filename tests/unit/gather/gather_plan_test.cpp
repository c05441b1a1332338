// SPDX-License-Identifier: MIT
// Gather planning: which entries merge (contiguous in both the file and the
// registration, same file, same registration, within the request limit),
// how long entries are split, and that every byte is covered exactly once.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "gather/gather_plan.hpp"
#include "phoenix/gather.hpp"
#include "test_support.hpp"

namespace phx {
namespace {

using detail::plan_gather;
using test::AlignedBuffer;
using test::TempDir;

constexpr std::size_t kBlock = 16384;
constexpr std::size_t kLimit = std::size_t{1} << 20;

class GatherPlanTest : public ::testing::Test {
 protected:
  GatherPlanTest()
      : file_a_(dir_ / "a", O_RDWR | O_CREAT),
        file_b_(dir_ / "b", O_RDWR | O_CREAT),
        dev_(Device::open(0, Engine::host)),
        mem_(kBlock * 512),
        reg_a_(dev_.register_memory(mem_.data(), kBlock * 256)),
        reg_b_(dev_.register_memory(mem_.data() + kBlock * 256, kBlock * 256)) {}

  GatherEntry block(File &f, const Registration &r, std::uint64_t file_block,
                    std::size_t slot) const {
    return {&f, &r, slot * kBlock, file_block * kBlock, kBlock};
  }

  TempDir dir_;
  File file_a_;
  File file_b_;
  Device dev_;
  AlignedBuffer mem_;
  Registration reg_a_;
  Registration reg_b_;
};

TEST_F(GatherPlanTest, MergesRunsContiguousInFileAndRegistration) {
  std::vector<GatherEntry> e;
  for (std::size_t i = 0; i < 8; ++i) {
    e.push_back(block(file_a_, reg_a_, 100 + i, 10 + i));
  }
  const auto plan = plan_gather(e, kLimit, true);
  ASSERT_EQ(plan.requests.size(), 1U);
  EXPECT_EQ(plan.requests[0].count, 8U);
  EXPECT_EQ(plan.requests[0].size, 8 * kBlock);
  EXPECT_EQ(plan.requests[0].file_offset, 100 * kBlock);
  EXPECT_EQ(plan.requests[0].reg_offset, 10 * kBlock);
}

TEST_F(GatherPlanTest, ContiguousInFileButNotInRegistrationDoesNotMerge) {
  // File blocks 0,1,2 to slots 5,3,9: neighbours in the file, scattered in memory.
  const std::vector<GatherEntry> e = {block(file_a_, reg_a_, 0, 5), block(file_a_, reg_a_, 1, 3),
                                      block(file_a_, reg_a_, 2, 9)};
  EXPECT_EQ(plan_gather(e, kLimit, true).requests.size(), 3U);
}

TEST_F(GatherPlanTest, ContiguousInRegistrationButNotInFileDoesNotMerge) {
  const std::vector<GatherEntry> e = {block(file_a_, reg_a_, 7, 0), block(file_a_, reg_a_, 3, 1),
                                      block(file_a_, reg_a_, 11, 2)};
  EXPECT_EQ(plan_gather(e, kLimit, true).requests.size(), 3U);
}

TEST_F(GatherPlanTest, DifferentFilesOrRegistrationsDoNotMerge) {
  // Offsets line up, but the second entry is another file, the third
  // another registration.
  const std::vector<GatherEntry> e = {block(file_a_, reg_a_, 0, 0), block(file_b_, reg_a_, 1, 1),
                                      block(file_a_, reg_b_, 1, 1)};
  EXPECT_EQ(plan_gather(e, kLimit, true).requests.size(), 3U);
}

TEST_F(GatherPlanTest, FindsNeighboursGivenOutOfOrder) {
  std::vector<GatherEntry> e;
  for (std::size_t i = 0; i < 32; ++i) {
    e.push_back(block(file_a_, reg_a_, i, i));
  }
  std::shuffle(e.begin(), e.end(), std::mt19937_64(7));
  const auto plan = plan_gather(e, kLimit, true);
  ASSERT_EQ(plan.requests.size(), 1U);
  EXPECT_EQ(plan.requests[0].count, 32U);
  // order lists the entries in file order.
  for (std::size_t k = 0; k < plan.order.size(); ++k) {
    EXPECT_EQ(e[plan.order[k]].file_offset, k * kBlock);
  }
}

TEST_F(GatherPlanTest, MergedRequestsStopAtTheLimit) {
  std::vector<GatherEntry> e;
  for (std::size_t i = 0; i < 200; ++i) {
    e.push_back(block(file_a_, reg_a_, i, i));
  }
  const auto plan = plan_gather(e, kLimit, true);
  // 1 MiB holds 64 blocks of 16 KiB: 64 + 64 + 64 + 8.
  ASSERT_EQ(plan.requests.size(), 4U);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.requests[i].size, kLimit);
    EXPECT_EQ(plan.requests[i].count, 64U);
  }
  EXPECT_EQ(plan.requests[3].count, 8U);
}

TEST_F(GatherPlanTest, WithoutMergingEveryEntryIsItsOwnRequest) {
  std::vector<GatherEntry> e;
  for (std::size_t i = 0; i < 10; ++i) {
    e.push_back(block(file_a_, reg_a_, i, i));
  }
  const auto plan = plan_gather(e, kLimit, false);
  ASSERT_EQ(plan.requests.size(), 10U);
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(plan.order[plan.requests[i].first], i);  // given order kept
  }
}

TEST_F(GatherPlanTest, SplitsLongEntriesAndNeverMergesTheirPieces) {
  // 2.5 MiB entry, then a 16 KiB entry contiguous with its end.
  const std::size_t big = kLimit * 2 + kLimit / 2;
  const std::vector<GatherEntry> e = {{&file_a_, &reg_a_, 0, 0, big},
                                      {&file_a_, &reg_a_, big, big, kBlock}};
  const auto plan = plan_gather(e, kLimit, true);
  ASSERT_EQ(plan.requests.size(), 4U);
  EXPECT_EQ(plan.requests[0].size, kLimit);
  EXPECT_EQ(plan.requests[1].size, kLimit);
  EXPECT_EQ(plan.requests[2].size, kLimit / 2);
  EXPECT_EQ(plan.requests[2].file_offset, 2 * kLimit);
  EXPECT_EQ(plan.requests[2].reg_offset, 2 * kLimit);
  EXPECT_EQ(plan.requests[3].size, kBlock);
  EXPECT_EQ(plan.requests[3].count, 1U);
}

TEST_F(GatherPlanTest, SkipsEmptyEntriesAndCoversEveryByteOnce) {
  std::mt19937_64 rng(3);
  std::vector<GatherEntry> e;
  std::size_t total = 0;
  for (std::size_t i = 0; i < 500; ++i) {
    const std::size_t slot = rng() % 200;
    const std::size_t size = (rng() % 4) * 4096;  // some empty
    e.push_back({&file_a_, &reg_a_, slot * kBlock, (rng() % 1000) * kBlock, size});
    total += size;
  }
  const auto plan = plan_gather(e, 64 * 1024, true);
  const std::size_t planned =
      std::accumulate(plan.requests.begin(), plan.requests.end(), std::size_t{0},
                      [](std::size_t s, const detail::PlannedRequest &r) { return s + r.size; });
  EXPECT_EQ(planned, total);
  for (const std::size_t i : plan.order) {
    EXPECT_NE(e[i].size, 0U);
  }
  for (const auto &r : plan.requests) {
    EXPECT_LE(r.size, 64U * 1024);
  }
}

}  // namespace
}  // namespace phx
