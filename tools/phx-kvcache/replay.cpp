// SPDX-License-Identifier: MIT
#include "replay.hpp"

#include <algorithm>
#include <chrono>

#include "common/pattern.hpp"
#include "kv_file.hpp"
#include "slot_pool.hpp"

namespace phx::kvcache {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Every block of the sequence read back at once: the slots of a sequence
// are mostly one run, so one copy rather than a cudaMemcpy per block.
void check_sequence(Engine &engine, std::span<const std::uint64_t> blocks,
                    std::span<const std::uint64_t> slots, std::size_t block_size,
                    std::vector<std::byte> &buf, ReplayStats &stats) {
  buf.resize(blocks.size() * block_size);
  engine.fetch(slots, buf);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::span<const std::byte> block(buf.data() + i * block_size, block_size);
    ++stats.blocks_checked;
    if (const auto bad = phxtools::find_mismatch(block, blocks[i] * block_size)) {
      if (stats.mismatches++ == 0) {
        stats.first_mismatch = "block " + std::to_string(blocks[i]) + " (slot " +
                               std::to_string(slots[i]) + ") at byte " +
                               std::to_string(*bad - blocks[i] * block_size);
      }
    }
  }
}

}  // namespace

ReplayStats replay(const Trace &trace, Engine &engine, std::size_t block_size,
                   std::size_t pool_blocks, bool verify) {
  ReplayStats stats;
  SlotPool pool(pool_blocks);
  std::vector<std::byte> checked;
  // End to end is everything but the checks, which a server would not do.
  Clock::duration checking{};
  const Clock::time_point start = Clock::now();
  for (const Sequence &seq : trace.sequences) {
    const std::vector<std::uint64_t> slots = pool.take(seq.blocks.size());
    const Clock::time_point io_start = Clock::now();
    stats.requests += engine.load(seq.blocks, slots);
    const Clock::time_point io_end = Clock::now();
    stats.io_seconds += seconds(io_end - io_start);
    stats.latencies.push_back(seconds(io_end - io_start));
    if (verify) {
      check_sequence(engine, seq.blocks, slots, block_size, checked, stats);
      checking += Clock::now() - io_end;
    }
    pool.give(slots);
    ++stats.sequences;
    stats.blocks += seq.blocks.size();
  }
  stats.e2e_seconds = seconds(Clock::now() - start - checking);
  stats.bytes = stats.blocks * block_size;
  return stats;
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) {
    return 0;
  }
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace phx::kvcache
