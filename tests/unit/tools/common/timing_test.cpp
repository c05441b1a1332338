// SPDX-License-Identifier: MIT
// The per-step statistics phx-breakdown and phx-e2e report.
#include "common/timing.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace phxtools {
namespace {

TEST(Timing, SummaryKeepsTheFirstSampleAndOrdersTheRest) {
  const SampleSummary s = summarize({7.0, 1.0, 3.0, 5.0});
  EXPECT_EQ(s.count, 4U);
  EXPECT_DOUBLE_EQ(s.first, 7.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 7.0);
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_DOUBLE_EQ(s.p50, 3.0);  // the lower median
  EXPECT_DOUBLE_EQ(s.p95, 7.0);
}

TEST(Timing, PercentilesAreTheNearestRank) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) {
    samples.push_back(i);
  }
  const SampleSummary s = summarize(samples);
  EXPECT_DOUBLE_EQ(s.first, 100.0);
  EXPECT_DOUBLE_EQ(s.p50, 50.0);
  EXPECT_DOUBLE_EQ(s.p95, 95.0);
  EXPECT_DOUBLE_EQ(s.p99, 99.0);
  EXPECT_DOUBLE_EQ(summarize({2.5}).p95, 2.5);
  EXPECT_DOUBLE_EQ(summarize({2.5}).p99, 2.5);
}

TEST(Timing, NoSamplesIsAnError) {
  EXPECT_THROW((void)summarize({}), std::invalid_argument);
}

// The process's age: positive, growing with wall time, and not the age of
// the machine (under an hour for a test process).
TEST(Timing, ProcessSecondsIsThisProcessesAge) {
  const double before = process_seconds();
  ASSERT_GT(before, 0.0);
  EXPECT_LT(before, 3600.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double after = process_seconds();
  EXPECT_GE(after - before, 0.08);
  EXPECT_LT(after - before, 10.0);
}

}  // namespace
}  // namespace phxtools
