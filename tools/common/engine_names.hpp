// SPDX-License-Identifier: MIT
// One spelling of each engine across the tools: libphoenix's own names
// (phx::to_string: auto, direct, host, compat, cufile), and, for the
// baselines that are not libphoenix engines, the tools' names (posix:
// pread/pwrite into host memory; pinned: phx-kvcache's host engine into
// pinned memory).  Older spellings are read as aliases ("phoenix" for
// direct, "gds" for cufile, "automatic" for auto), never printed.
#ifndef PHX_TOOLS_ENGINE_NAMES_HPP
#define PHX_TOOLS_ENGINE_NAMES_HPP

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "phoenix/phoenix.hpp"

namespace phxtools {

/// The libphoenix engine @p name names (aliases included), if it names one.
[[nodiscard]] std::optional<phx::Engine> library_engine(std::string_view name);

/// The canonical spelling of @p name: libphoenix's for its engines, any
/// other name as it is.
[[nodiscard]] std::string canonical_engine(std::string_view name);

/// canonical_engine(@p name) when that is one of @p known; else throws
/// std::invalid_argument naming the value and the names expected.
[[nodiscard]] std::string parse_engine_name(std::string_view name,
                                            const std::vector<std::string> &known);

/// "a, b or c", for help texts and errors.
[[nodiscard]] std::string join_names(const std::vector<std::string> &names);

}  // namespace phxtools

#endif  // PHX_TOOLS_ENGINE_NAMES_HPP
