// SPDX-License-Identifier: MIT
// Reading PHX_* variables: sizes with binary suffixes, checked ranges.  Only
// phx::Options (core/options.cpp) and the process-wide settings read once
// (PHX_LOG, PHX_CUDA_DRIVER, PHX_CUFILE_LIBRARY) call these.
#ifndef PHOENIX_LIB_CONFIG_HPP
#define PHOENIX_LIB_CONFIG_HPP

#include <cstddef>
#include <optional>
#include <string_view>

namespace phx::detail {

/// Parses "4096", "64K", "16M", "1G" (binary units).  nullopt when malformed.
[[nodiscard]] std::optional<std::size_t> parse_size(std::string_view text);

/// Value of size variable @p name within [min, max], @p fallback when unset.
/// Throws std::system_error(EINVAL) naming the variable when malformed or
/// out of range.
[[nodiscard]] std::size_t env_size(const char *name, std::size_t fallback, std::size_t min,
                                   std::size_t max);

/// Value of count variable @p name (threads, depths: a whole number, no
/// suffix) within [min, max], @p fallback when unset.  Throws
/// std::system_error(EINVAL) naming the variable when malformed or out of
/// range.
[[nodiscard]] std::size_t env_count(const char *name, std::size_t fallback, std::size_t min,
                                    std::size_t max);

/// The variable's value, or nullopt when unset or empty.
[[nodiscard]] std::optional<std::string_view> env_string(const char *name);

/// Largest single read/write syscall; the kernel caps one at MAX_RW_COUNT
/// (INT_MAX rounded down to a page), and io_uring's length field is 32 bits.
inline constexpr std::size_t kMaxSyscallBytes = std::size_t{1} << 30;

}  // namespace phx::detail

#endif  // PHOENIX_LIB_CONFIG_HPP
