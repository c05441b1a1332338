// SPDX-License-Identifier: MIT
// The data phxbench writes and checks: every byte is a function of its file
// offset (a hash of the offset's 8-byte word, then the byte within it), so
// a read from the wrong offset, a torn or shifted read and a stale buffer
// all show up as mismatches.
#ifndef PHXBENCH_PATTERN_HPP
#define PHXBENCH_PATTERN_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace phxbench {

/// The pattern's byte at @p file_offset.
[[nodiscard]] std::byte pattern_byte(std::uint64_t file_offset) noexcept;

/// Fills @p dst with the pattern of the file range starting at @p file_offset.
void fill_pattern(std::span<std::byte> dst, std::uint64_t file_offset) noexcept;

/// The file offset of the first byte of @p data (read from @p file_offset)
/// that differs from the pattern, if any.
[[nodiscard]] std::optional<std::uint64_t> find_mismatch(std::span<const std::byte> data,
                                                         std::uint64_t file_offset) noexcept;

}  // namespace phxbench

#endif  // PHXBENCH_PATTERN_HPP
