// SPDX-License-Identifier: MIT
// Timing of setup steps and requests, shared by phx-breakdown and phx-e2e:
// a monotonic clock in microseconds, and the statistics their records give
// per step.  Sample counts are bounded by a --repeat or --loops flag, so
// the samples are kept and sorted (phxbench's open-ended runs use
// histogram.hpp instead).
#ifndef PHX_TOOLS_TIMING_HPP
#define PHX_TOOLS_TIMING_HPP

#include <chrono>
#include <cstddef>
#include <vector>

namespace phxtools {

using Clock = std::chrono::steady_clock;

/// Microseconds from @p start to now.
[[nodiscard]] inline double us_since(Clock::time_point start) noexcept {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

/// Statistics of one step's samples, in the samples' unit.  first is kept
/// apart because one-time costs (a driver opened once per process, first
/// touch of pages) land there.
struct SampleSummary {
  std::size_t count = 0;
  double first = 0;
  double mean = 0;
  double min = 0;
  double p50 = 0;  ///< the lower median: sample (count - 1) / 2 in order
  double p95 = 0;  ///< nearest rank
  double p99 = 0;  ///< nearest rank
  double max = 0;
};

/// Throws std::invalid_argument when @p samples is empty.
[[nodiscard]] SampleSummary summarize(std::vector<double> samples);

/// Seconds since this process started (its start time in /proc/self/stat
/// against CLOCK_BOOTTIME): what `time` would say so far, loader start-up,
/// CUDA initialisation and all.  Negative when /proc cannot tell.
[[nodiscard]] double process_seconds() noexcept;

}  // namespace phxtools

#endif  // PHX_TOOLS_TIMING_HPP
