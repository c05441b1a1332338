// SPDX-License-Identifier: MIT
// The tools' output: one JSON record per line, each whole when written.
#ifndef PHX_TOOLS_RECORD_HPP
#define PHX_TOOLS_RECORD_HPP

#include <ostream>

#include <nlohmann/json.hpp>

namespace phxtools {

/// Writes @p record on one line and flushes, so a reader that stops the
/// tool never sees half a record; bytes that are not UTF-8 (paths) are
/// replaced rather than thrown on.
void print_record(std::ostream &out, const nlohmann::json &record);

}  // namespace phxtools

#endif  // PHX_TOOLS_RECORD_HPP
