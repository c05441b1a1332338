// SPDX-License-Identifier: MIT
// Replaying a trace: per sequence, take pool slots, load the sequence's
// blocks into them (timed), optionally check every block, free the slots.
#ifndef PHX_KVCACHE_REPLAY_HPP
#define PHX_KVCACHE_REPLAY_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine.hpp"
#include "trace.hpp"

namespace phx::kvcache {

struct ReplayStats {
  std::size_t sequences = 0;
  std::uint64_t blocks = 0;
  std::uint64_t bytes = 0;
  std::uint64_t requests = 0;
  double io_seconds = 0;          ///< inside the engine's load calls
  double e2e_seconds = 0;         ///< the whole replay but the checks
  std::vector<double> latencies;  ///< seconds per sequence load
  std::uint64_t blocks_checked = 0;
  std::uint64_t mismatches = 0;
  std::string first_mismatch;  ///< "block 17 (slot 3) at byte 4096"
};

[[nodiscard]] ReplayStats replay(const Trace &trace, Engine &engine, std::size_t block_size,
                                 std::size_t pool_blocks, bool verify);

/// The @p q quantile (0..1) of @p values by linear interpolation; 0 when empty.
[[nodiscard]] double quantile(std::vector<double> values, double q);

}  // namespace phx::kvcache

#endif  // PHX_KVCACHE_REPLAY_HPP
