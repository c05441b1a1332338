// SPDX-License-Identifier: MIT
// KV-cache block traces (../shared/data/kvcache-traces/README.md): a
// "Seq" line opens a sequence, each "Round" line adds a bracketed list of
// block ids to it.
#ifndef PHX_KVCACHE_TRACE_HPP
#define PHX_KVCACHE_TRACE_HPP

#include <cstdint>
#include <filesystem>
#include <istream>
#include <string>
#include <vector>

namespace phx::kvcache {

struct Sequence {
  std::string id;                     ///< the conversation id
  std::vector<std::uint64_t> blocks;  ///< every round's block ids, in order
};

struct Trace {
  std::string name;  ///< file name without directory
  std::vector<Sequence> sequences;
  [[nodiscard]] std::uint64_t block_count() const noexcept;
  [[nodiscard]] std::uint64_t largest_block() const noexcept;   ///< 0 when empty
  [[nodiscard]] std::size_t longest_sequence() const noexcept;  ///< blocks
};

/// Parses a trace; throws std::runtime_error naming the line on malformed
/// input (a Round before any Seq, an unclosed list, a bad number).
[[nodiscard]] Trace parse_trace(std::istream &in, std::string name);
[[nodiscard]] Trace load_trace(const std::filesystem::path &path);

}  // namespace phx::kvcache

#endif  // PHX_KVCACHE_TRACE_HPP
