// SPDX-License-Identifier: MIT
// The latency histogram: bucket geometry, percentiles of known
// distributions within the stated relative error, merging.
#include "histogram.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace phxbench {
namespace {

// The nearest-rank percentile of sorted samples, as Histogram defines it.
std::uint64_t exact_percentile(const std::vector<std::uint64_t> &sorted, double q) {
  auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(sorted.size())));
  rank = std::clamp<std::uint64_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

void expect_within_bound(const Histogram &h, std::vector<std::uint64_t> samples) {
  std::sort(samples.begin(), samples.end());
  for (const double q : {0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0}) {
    const auto exact = static_cast<double>(exact_percentile(samples, q));
    const auto got = static_cast<double>(h.percentile(q));
    EXPECT_LE(std::abs(got - exact), exact * Histogram::kMaxRelativeError)
        << "q " << q << ": histogram " << got << ", exact " << exact;
  }
}

TEST(Histogram, EmptyReportsZero) {
  const Histogram h;
  EXPECT_EQ(h.count(), 0U);
  EXPECT_EQ(h.percentile(0.5), 0U);
  EXPECT_EQ(h.min(), 0U);
  EXPECT_EQ(h.max(), 0U);
  EXPECT_EQ(h.mean(), 0.0);
}

TEST(Histogram, BucketsCoverEveryValueWithBoundedWidth) {
  std::mt19937_64 rng(42);
  std::vector<std::uint64_t> values = {0, 1, 127, 128, 129, 255, 256, 1000, UINT64_MAX};
  for (int i = 0; i < 100000; ++i) {
    values.push_back(rng() >> (rng() % 64));
  }
  for (const std::uint64_t v : values) {
    const std::size_t b = Histogram::bucket_of(v);
    ASSERT_LT(b, Histogram::kBuckets) << v;
    const std::uint64_t low = Histogram::bucket_low(b);
    const std::uint64_t width = Histogram::bucket_width(b);
    EXPECT_LE(low, v);
    EXPECT_LE(v - low, width - 1) << v;
    // Width-1 buckets are exact; wider ones are narrow relative to their values.
    if (width > 1) {
      EXPECT_LE(static_cast<double>(width) / static_cast<double>(low),
                2.0 * Histogram::kMaxRelativeError)
          << v;
    }
  }
  // Buckets tile the line: each starts where the previous one ends.
  for (std::size_t b = 1; b < Histogram::kBuckets; ++b) {
    EXPECT_EQ(Histogram::bucket_low(b),
              Histogram::bucket_low(b - 1) + Histogram::bucket_width(b - 1))
        << b;
  }
}

TEST(Histogram, SmallValuesAreExact) {
  Histogram h;
  std::vector<std::uint64_t> samples;
  for (std::uint64_t v = 0; v < Histogram::kSub; ++v) {
    for (std::uint64_t k = 0; k <= v % 5; ++k) {
      h.record(v);
      samples.push_back(v);
    }
  }
  std::sort(samples.begin(), samples.end());
  for (const double q : {0.0, 0.1, 0.5, 0.77, 0.99, 1.0}) {
    EXPECT_EQ(h.percentile(q), exact_percentile(samples, q)) << q;
  }
}

TEST(Histogram, ConstantValueIsReportedExactly) {
  Histogram h;
  for (int i = 0; i < 1000; ++i) {
    h.record(123456789);
  }
  // Clamped to [min, max], which are exact.
  EXPECT_EQ(h.percentile(0.5), 123456789U);
  EXPECT_EQ(h.percentile(0.999), 123456789U);
  EXPECT_DOUBLE_EQ(h.mean(), 123456789.0);
}

TEST(Histogram, UniformPercentilesWithinBound) {
  Histogram h;
  std::vector<std::uint64_t> samples;
  for (std::uint64_t v = 1; v <= 1000000; ++v) {
    h.record(v);
    samples.push_back(v);
  }
  expect_within_bound(h, samples);
  EXPECT_EQ(h.count(), 1000000U);
  EXPECT_EQ(h.min(), 1U);
  EXPECT_EQ(h.max(), 1000000U);
  EXPECT_DOUBLE_EQ(h.mean(), 500000.5);
}

TEST(Histogram, ExponentialPercentilesWithinBound) {
  std::mt19937_64 rng(7);
  std::exponential_distribution<double> dist(1.0 / 20000.0);  // mean 20 us in ns
  Histogram h;
  std::vector<std::uint64_t> samples;
  for (int i = 0; i < 200000; ++i) {
    const auto v = static_cast<std::uint64_t>(dist(rng));
    h.record(v);
    samples.push_back(v);
  }
  expect_within_bound(h, samples);
}

TEST(Histogram, HeavyTailPercentilesWithinBound) {
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> dist(10.0, 2.5);  // microseconds to seconds
  Histogram h;
  std::vector<std::uint64_t> samples;
  long double sum = 0;
  for (int i = 0; i < 200000; ++i) {
    const auto v = static_cast<std::uint64_t>(dist(rng));
    h.record(v);
    samples.push_back(v);
    sum += static_cast<long double>(v);
  }
  expect_within_bound(h, samples);
  EXPECT_NEAR(h.mean(), static_cast<double>(sum / samples.size()), 1e-6 * h.mean());
}

TEST(Histogram, MergeEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(3);
  Histogram all;
  Histogram parts[4];
  for (int i = 0; i < 40000; ++i) {
    const std::uint64_t v = rng() % 10000000;
    all.record(v);
    parts[i % 4].record(v);
  }
  Histogram merged;
  for (const Histogram &p : parts) {
    merged.merge(p);
  }
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.min(), all.min());
  EXPECT_EQ(merged.max(), all.max());
  EXPECT_DOUBLE_EQ(merged.mean(), all.mean());
  for (const double q : {0.0, 0.5, 0.95, 0.99, 0.999, 1.0}) {
    EXPECT_EQ(merged.percentile(q), all.percentile(q)) << q;
  }
  // Merging an empty histogram changes nothing.
  merged.merge(Histogram());
  EXPECT_EQ(merged.min(), all.min());
  EXPECT_EQ(merged.count(), all.count());
}

}  // namespace
}  // namespace phxbench
