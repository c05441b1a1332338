// SPDX-License-Identifier: MIT
// What a descriptor needs for O_DIRECT: whether it has the flag, and the
// offset and memory alignment the kernel demands.
#ifndef PHOENIX_LIB_FILE_CAPS_HPP
#define PHOENIX_LIB_FILE_CAPS_HPP

#include <cstddef>

#include "io/aligned_io.hpp"

namespace phx::detail {

/// Alignment used when the kernel cannot tell (pre-6.1 statx, odd files):
/// 4 KiB satisfies every logical block size in use.
inline constexpr std::size_t kFallbackDirectAlign = 4096;

/// Policy for @p fd: O_DIRECT from fcntl(F_GETFL), alignment from statx
/// STATX_DIOALIGN (Linux 6.1+), BLKSSZGET for block devices, else 4 KiB.
/// Returns false with errno set when @p fd is not an open descriptor.
[[nodiscard]] bool policy_for_fd(int fd, IoPolicy &policy) noexcept;

/// A policy that accepts any request that is 4 KiB aligned in buffer, size
/// and offset, whatever the descriptor's flags: the fast path needs no query.
[[nodiscard]] IoPolicy page_aligned_policy() noexcept;

}  // namespace phx::detail

#endif  // PHOENIX_LIB_FILE_CAPS_HPP
