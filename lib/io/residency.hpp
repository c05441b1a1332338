// SPDX-License-Identifier: MIT
// How much of a file the page cache holds, to choose between buffered reads
// (served from memory) and O_DIRECT (no double copy, no cache pollution).
#ifndef PHOENIX_LIB_IO_RESIDENCY_HPP
#define PHOENIX_LIB_IO_RESIDENCY_HPP

#include <cstdint>

namespace phx::detail {

/// Fraction (0 to 1) of the pages of [offset, offset + length) of @p fd in
/// the page cache: exact up to 64 MiB (4 KiB pages), estimated from 1024
/// pages, one per equal cell of the range, past that; 0 when it cannot be
/// told (mmap or mincore failing).
[[nodiscard]] double resident_fraction(int fd, std::uint64_t offset, std::uint64_t length) noexcept;

/// The same by mapping the range and asking mincore(2) (what
/// resident_fraction does on kernels without cachestat(2), and for ranges
/// past 64 MiB).
[[nodiscard]] double mincore_fraction(int fd, std::uint64_t offset, std::uint64_t length) noexcept;

/// The cache policy's line: a range at least this resident is read through
/// the page cache (a memory copy), anything less with O_DIRECT (the disk at
/// full queue depth, no second copy, no eviction of what others cached).
inline constexpr double kResidentForBuffered = 0.5;

/// The policy for one read of [offset, offset + length): true when it
/// should go through the page cache.
[[nodiscard]] inline bool read_buffered(int fd, std::uint64_t offset,
                                        std::uint64_t length) noexcept {
  return resident_fraction(fd, offset, length) >= kResidentForBuffered;
}

}  // namespace phx::detail

#endif  // PHOENIX_LIB_IO_RESIDENCY_HPP
