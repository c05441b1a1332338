// SPDX-License-Identifier: MIT
// What the rest of the library needs of phx::Options beyond the public face.
#ifndef PHOENIX_LIB_CORE_OPTIONS_HPP
#define PHOENIX_LIB_CORE_OPTIONS_HPP

#include <string>

namespace phx::detail {

/// "PHX_ENGINE=<value>" when the process default engine came from the
/// environment, else empty: EngineChoice::reason says where a choice came from.
[[nodiscard]] std::string default_engine_origin();

/// Forgets the process defaults: the next Options::defaults() reads the
/// environment again.  For tests that change the environment; a program
/// sets it before it starts.
void refresh_default_options() noexcept;

}  // namespace phx::detail

#endif  // PHOENIX_LIB_CORE_OPTIONS_HPP
