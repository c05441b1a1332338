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

}  // namespace phx::detail

#endif  // PHOENIX_LIB_IO_RESIDENCY_HPP
