// SPDX-License-Identifier: MIT
// What the rest of the library needs of phx::Options beyond the public face.
#ifndef PHOENIX_LIB_CORE_OPTIONS_HPP
#define PHOENIX_LIB_CORE_OPTIONS_HPP

#include <string>
#include <string_view>

#include "phoenix/phoenix.hpp"

namespace phx::detail {

/// "auto" or "descriptor"; anything else throws std::system_error(EINVAL)
/// naming @p what (the variable or field).
[[nodiscard]] ReadCache parse_read_cache(std::string_view text, const std::string &what);
[[nodiscard]] std::string_view to_string(ReadCache cache) noexcept;

/// "PHX_ENGINE=<value>" when the process default engine came from the
/// environment, else empty: EngineChoice::reason says where a choice came from.
[[nodiscard]] std::string default_engine_origin();

/// Forgets the process defaults: the next Options::defaults() reads the
/// environment again.  For tests that change the environment; a program
/// sets it before it starts.
void refresh_default_options() noexcept;

}  // namespace phx::detail

#endif  // PHOENIX_LIB_CORE_OPTIONS_HPP
