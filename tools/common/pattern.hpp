// SPDX-License-Identifier: MIT
// The data the tools write and check: every byte is a function of its file
// offset and a seed (a hash of the offset's 8-byte word, then the byte within it), so
// a read from the wrong offset, a torn or shifted read and a stale buffer
// all show up as mismatches.
#ifndef PHX_TOOLS_PATTERN_HPP
#define PHX_TOOLS_PATTERN_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace phxtools {

/// The seed files are written with unless a tool is told otherwise; fixed,
/// so files stay valid across runs and tools.
inline constexpr std::uint64_t kPatternSeed = 0x7068786265e7c401ULL;

/// The pattern's byte at @p file_offset.
[[nodiscard]] std::byte pattern_byte(std::uint64_t file_offset,
                                     std::uint64_t seed = kPatternSeed) noexcept;

/// Fills @p dst with the pattern of the file range starting at @p file_offset.
void fill_pattern(std::span<std::byte> dst, std::uint64_t file_offset,
                  std::uint64_t seed = kPatternSeed) noexcept;

/// The file offset of the first byte of @p data (read from @p file_offset)
/// that differs from the pattern, if any.
[[nodiscard]] std::optional<std::uint64_t> find_mismatch(
    std::span<const std::byte> data, std::uint64_t file_offset,
    std::uint64_t seed = kPatternSeed) noexcept;

}  // namespace phxtools

#endif  // PHX_TOOLS_PATTERN_HPP
