// SPDX-License-Identifier: MIT
#include "core/log.hpp"

#include <cstdio>
#include <mutex>

#include "core/config.hpp"

namespace phx::detail {
namespace {

LogLevel level_from_env() noexcept {
  auto value = env_string("PHX_LOG");
  if (!value) {
    return LogLevel::off;
  }
  if (*value == "error") {
    return LogLevel::error;
  }
  if (*value == "warn") {
    return LogLevel::warn;
  }
  if (*value == "info") {
    return LogLevel::info;
  }
  if (*value == "debug") {
    return LogLevel::debug;
  }
  return LogLevel::off;
}

constexpr const char *kLevelNames[] = {"off", "error", "warn", "info", "debug"};

}  // namespace

// Read on every call: logging happens on open and error paths only, and a
// process may set PHX_LOG after loading the library.
bool log_enabled(LogLevel level) noexcept {
  return level != LogLevel::off && level <= level_from_env();
}

void log(LogLevel level, std::string_view message) noexcept {
  if (!log_enabled(level)) {
    return;
  }
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  std::fprintf(stderr, "phoenix[%s]: %.*s\n", kLevelNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace phx::detail
