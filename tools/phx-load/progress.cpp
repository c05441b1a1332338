// SPDX-License-Identifier: MIT
#include "progress.hpp"

#include <algorithm>
#include <string>

namespace phx::load_tool {
namespace {

constexpr int kBarWidth = 30;
constexpr auto kLogInterval = std::chrono::seconds(5);

double gb(std::uint64_t bytes) {
  return static_cast<double>(bytes) / 1e9;
}

}  // namespace

Progress::Progress(std::FILE *out, bool tty, bool quiet) noexcept
    : out_(out),
      tty_(tty),
      quiet_(quiet),
      start_(std::chrono::steady_clock::now()),
      last_log_(start_) {}

void Progress::update(std::uint64_t done, std::uint64_t total) {
  if (quiet_) {
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!tty_ && now - last_log_ < kLogInterval) {
    return;
  }
  last_log_ = now;
  draw(done, total, false);
}

void Progress::finish(std::uint64_t done, std::uint64_t total) {
  if (quiet_) {
    return;
  }
  draw(done, total, true);
}

void Progress::draw(std::uint64_t done, std::uint64_t total, bool final) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? gb(done) / seconds : 0;
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  const double eta = rate > 0 ? (gb(total) - gb(done)) / rate : 0;
  if (tty_) {
    const int filled = std::clamp(static_cast<int>(fraction * kBarWidth), 0, kBarWidth);
    const std::string bar = std::string(static_cast<std::size_t>(filled), '#') +
                            std::string(static_cast<std::size_t>(kBarWidth - filled), '.');
    (void)std::fprintf(out_, "\r[%s] %6.2f/%.2f GB  %6.2f GB/s  ETA %4.0fs", bar.c_str(), gb(done),
                       gb(total), rate, eta);
    if (final) {
      (void)std::fputc('\n', out_);
    }
    drew_ = true;
  } else {
    (void)std::fprintf(out_, "phx-load: %.2f of %.2f GB (%.0f%%), %.2f GB/s, %.1f s\n", gb(done),
                       gb(total), fraction * 100, rate, seconds);
  }
  (void)std::fflush(out_);
}

}  // namespace phx::load_tool
