// SPDX-License-Identifier: MIT
// Reading small kernel-provided files and directories (/proc, /sys, /boot)
// without exceptions: a missing or unreadable file is an answer, not an error.
#ifndef PHXFS_CHECK_SYSFS_HPP
#define PHXFS_CHECK_SYSFS_HPP

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace phxcheck {

/// Thread-safe strerror.
[[nodiscard]] std::string errno_message(int err);

/// The whole file, up to @p limit bytes.  On failure returns nullopt and
/// sets @p error to "<path>: <reason>".
[[nodiscard]] std::optional<std::string> read_text(const std::string &path, std::string &error,
                                                   std::size_t limit = std::size_t{1} << 24);

/// The file's first line without trailing whitespace, or nullopt.
[[nodiscard]] std::optional<std::string> read_line(const std::string &path);

/// Names in @p path (without "." and ".."), or nullopt with @p error set.
[[nodiscard]] std::optional<std::vector<std::string>> list_dir(const std::string &path,
                                                               std::string &error);

[[nodiscard]] bool path_exists(const std::string &path);

/// @p text without leading and trailing whitespace.
[[nodiscard]] std::string_view trim(std::string_view text);

}  // namespace phxcheck

#endif  // PHXFS_CHECK_SYSFS_HPP
