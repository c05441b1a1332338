// SPDX-License-Identifier: MIT
// The library prints nothing unless PHX_LOG=error|warn|info|debug asks for it.
#ifndef PHOENIX_LIB_LOG_HPP
#define PHOENIX_LIB_LOG_HPP

#include <string_view>

namespace phx::detail {

enum class LogLevel { off = 0, error, warn, info, debug };

[[nodiscard]] bool log_enabled(LogLevel level) noexcept;
void log(LogLevel level, std::string_view message) noexcept;

}  // namespace phx::detail

#endif  // PHOENIX_LIB_LOG_HPP
