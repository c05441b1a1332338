// SPDX-License-Identifier: MIT
// A log-linear latency histogram: exact below 2^kSubBits nanoseconds, then
// 2^kSubBits buckets per power of two, so every recorded value lands in a
// bucket narrower than 1/2^kSubBits of its lower bound.  Reporting the
// bucket's midpoint bounds the relative error of any percentile by
// kMaxRelativeError.  Fixed size whatever the run length; histograms of
// different threads merge by adding counts.
#ifndef PHXBENCH_HISTOGRAM_HPP
#define PHXBENCH_HISTOGRAM_HPP

#include <array>
#include <cstddef>
#include <cstdint>

namespace phxbench {

class Histogram {
 public:
  static constexpr unsigned kSubBits = 7;
  static constexpr std::uint64_t kSub = std::uint64_t{1} << kSubBits;
  static constexpr std::size_t kBuckets = kSub + (64 - kSubBits) * kSub;
  /// Bound on |reported - true| / true for any percentile.
  static constexpr double kMaxRelativeError = 1.0 / (2.0 * static_cast<double>(kSub));

  void record(std::uint64_t value_ns) noexcept;
  void merge(const Histogram &other) noexcept;

  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
  [[nodiscard]] std::uint64_t min() const noexcept { return count_ == 0 ? 0 : min_; }
  [[nodiscard]] std::uint64_t max() const noexcept { return max_; }
  /// Exact: kept from the sum of the recorded values.
  [[nodiscard]] double mean() const noexcept;
  /// Nearest-rank percentile (@p q in [0, 1]): the value v such that at least
  /// q * count() recorded values are <= v, to within kMaxRelativeError;
  /// 0 when empty.
  [[nodiscard]] std::uint64_t percentile(double q) const noexcept;

  [[nodiscard]] static std::size_t bucket_of(std::uint64_t value) noexcept;
  [[nodiscard]] static std::uint64_t bucket_low(std::size_t bucket) noexcept;
  [[nodiscard]] static std::uint64_t bucket_width(std::size_t bucket) noexcept;

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t min_ = UINT64_MAX;
  std::uint64_t max_ = 0;
  long double sum_ = 0;
};

}  // namespace phxbench

#endif  // PHXBENCH_HISTOGRAM_HPP
