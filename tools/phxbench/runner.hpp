// SPDX-License-Identifier: MIT
// Runs one benchmark: worker threads, each with its own buffers from the
// engine, issue requests in the chosen mode until the size or time bound,
// after an optional warm-up that is not measured.
#ifndef PHXBENCH_RUNNER_HPP
#define PHXBENCH_RUNNER_HPP

#include <cstdint>
#include <optional>
#include <string>

#include "engine.hpp"
#include "histogram.hpp"
#include "options.hpp"

namespace phxbench {

struct VerifyResult {
  bool ran = false;
  bool ok = true;
  std::uint64_t bytes_checked = 0;
  std::uint64_t mismatched_ios = 0;  ///< requests (or read-back ranges) with a wrong byte
  std::optional<std::uint64_t> first_mismatch_offset;
};

struct RunResult {
  std::uint64_t bytes = 0;
  std::uint64_t ops = 0;
  double seconds = 0;
  Histogram latency;
  std::string latency_of;  ///< "io": one request; "batch": one batch of up to depth requests
  double cpu_user_s = 0;
  double cpu_sys_s = 0;
  std::uint64_t warmup_bytes = 0;
  double warmup_seconds = 0;
  /// Stream mode: seconds the threads spent in the enqueue calls (summed
  /// over threads), the submitting side of each batch's latency.
  double enqueue_seconds = 0;
  VerifyResult verify;
};

/// Runs the benchmark on @p file over its first @p length bytes.  Throws
/// Unavailable when the engine cannot do the mode, std::invalid_argument for
/// a configuration that cannot run, and the I/O errors.
[[nodiscard]] RunResult run_benchmark(const Options &options, Engine &engine, phx::File &file,
                                      std::uint64_t length);

}  // namespace phxbench

#endif  // PHXBENCH_RUNNER_HPP
