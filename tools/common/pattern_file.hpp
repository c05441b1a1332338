// SPDX-License-Identifier: MIT
// Files holding the verification pattern (pattern.hpp), written by phxbench
// --create and by phx-breakdown and phx-e2e for their scratch files.
#ifndef PHX_TOOLS_PATTERN_FILE_HPP
#define PHX_TOOLS_PATTERN_FILE_HPP

#include <cstdint>
#include <string>

namespace phxtools {

/// Writes the pattern over [0, length) of @p path and syncs it, creating a
/// regular file if needed and cutting an existing one to @p length (a block
/// device keeps its size).  Throws std::system_error naming the path and
/// offset.
void create_pattern_file(const std::string &path, std::uint64_t length);

}  // namespace phxtools

#endif  // PHX_TOOLS_PATTERN_FILE_HPP
