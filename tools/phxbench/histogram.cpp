// SPDX-License-Identifier: MIT
#include "histogram.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace phxbench {

std::size_t Histogram::bucket_of(std::uint64_t value) noexcept {
  if (value < kSub) {
    return static_cast<std::size_t>(value);
  }
  // value in [2^e, 2^(e+1)); keep its top kSubBits + 1 bits.
  const unsigned e = static_cast<unsigned>(std::bit_width(value)) - 1;
  const unsigned shift = e - kSubBits;
  const std::uint64_t sub = (value >> shift) - kSub;
  return static_cast<std::size_t>(kSub + shift * kSub + sub);
}

std::uint64_t Histogram::bucket_low(std::size_t bucket) noexcept {
  if (bucket < kSub) {
    return bucket;
  }
  const std::uint64_t shift = (bucket - kSub) / kSub;
  const std::uint64_t sub = (bucket - kSub) % kSub;
  return (kSub + sub) << shift;
}

std::uint64_t Histogram::bucket_width(std::size_t bucket) noexcept {
  if (bucket < kSub) {
    return 1;
  }
  return std::uint64_t{1} << ((bucket - kSub) / kSub);
}

void Histogram::record(std::uint64_t value_ns) noexcept {
  ++counts_[bucket_of(value_ns)];
  ++count_;
  min_ = std::min(min_, value_ns);
  max_ = std::max(max_, value_ns);
  sum_ += static_cast<long double>(value_ns);
}

void Histogram::merge(const Histogram &other) noexcept {
  for (std::size_t i = 0; i < kBuckets; ++i) {
    counts_[i] += other.counts_[i];
  }
  count_ += other.count_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
}

double Histogram::mean() const noexcept {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_ / static_cast<long double>(count_));
}

std::uint64_t Histogram::percentile(double q) const noexcept {
  if (count_ == 0) {
    return 0;
  }
  q = std::clamp(q, 0.0, 1.0);
  // Nearest rank: the smallest rank r (1-based) with r >= q * count.
  auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_)));
  rank = std::clamp<std::uint64_t>(rank, 1, count_);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      const std::uint64_t width = bucket_width(i);
      const std::uint64_t mid = bucket_low(i) + (width - 1) / 2;
      return std::clamp(mid, min_, max_);
    }
  }
  return max_;
}

}  // namespace phxbench
