// SPDX-License-Identifier: MIT
// The offloaded KV-cache file: every 8-byte word is a function of its file
// offset, so any block read at any block size can be checked, and one file
// serves every block size that fits in it.
#ifndef PHX_KVCACHE_KV_FILE_HPP
#define PHX_KVCACHE_KV_FILE_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace phx::kvcache {

/// The word at file offset @p offset (a multiple of 8).
[[nodiscard]] std::uint64_t pattern_word(std::uint64_t offset) noexcept;

/// Fills @p dst with the file's bytes from @p offset (a multiple of 8).
void fill_pattern(std::span<std::byte> dst, std::uint64_t offset) noexcept;

/// Offset (relative to @p data) of the first word that differs from the
/// file's bytes at @p offset, or data.size() when all match.
[[nodiscard]] std::size_t first_mismatch(std::span<const std::byte> data,
                                         std::uint64_t offset) noexcept;

/// Makes @p path hold at least @p size bytes of the pattern: reused as it
/// is when already that long with the pattern at its start and at
/// size's end; else (re)written.  Returns true when it wrote.  Throws
/// std::system_error.
bool ensure_kv_file(const std::filesystem::path &path, std::uint64_t size);

}  // namespace phx::kvcache

#endif  // PHX_KVCACHE_KV_FILE_HPP
