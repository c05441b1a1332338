// SPDX-License-Identifier: MIT
// Building the messages every failure carries: the operation, the file, the
// offset and the size, so a log line is enough to find the request.
#ifndef PHOENIX_LIB_ERROR_HPP
#define PHOENIX_LIB_ERROR_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace phx::detail {

/// "read /data/f: offset 4096, size 8192"
[[nodiscard]] std::string describe_io(std::string_view op, const std::filesystem::path &path,
                                      std::uint64_t offset, std::size_t size);

/// Throws std::system_error(err) with @p what.
[[noreturn]] void throw_errno(int err, const std::string &what);

/// Throws phx::IoError: "<describe_io>: <detail>, <done> bytes done".
[[noreturn]] void throw_io(int err, std::string_view op, const std::filesystem::path &path,
                           std::uint64_t offset, std::size_t size, std::size_t done,
                           std::string_view detail = {});

/// Thread-safe strerror.
[[nodiscard]] std::string errno_text(int err);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_ERROR_HPP
