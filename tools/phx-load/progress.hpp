// SPDX-License-Identifier: MIT
// Load progress on stderr: a redrawn bar (bytes, GB/s, ETA) on a terminal,
// a plain line every few seconds otherwise (logs, CI).
#ifndef PHOENIX_TOOLS_PHX_LOAD_PROGRESS_HPP
#define PHOENIX_TOOLS_PHX_LOAD_PROGRESS_HPP

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace phx::load_tool {

class Progress {
 public:
  /// @p tty: draw a bar; otherwise log lines.  @p quiet: nothing at all.
  Progress(std::FILE *out, bool tty, bool quiet) noexcept;
  /// Called with the bytes done so far; throttles itself.
  void update(std::uint64_t done, std::uint64_t total);
  /// Ends the bar's line.
  void finish(std::uint64_t done, std::uint64_t total);

 private:
  void draw(std::uint64_t done, std::uint64_t total, bool final);
  std::FILE *out_;
  bool tty_;
  bool quiet_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_log_;
  bool drew_ = false;
};

}  // namespace phx::load_tool

#endif  // PHOENIX_TOOLS_PHX_LOAD_PROGRESS_HPP
