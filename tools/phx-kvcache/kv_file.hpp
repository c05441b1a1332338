// SPDX-License-Identifier: MIT
// The offloaded KV-cache file: the tools' pattern (common/pattern.hpp), a
// function of the file offset, so any block read at any block size can be
// checked, and one file serves every block size that fits in it.
#ifndef PHX_KVCACHE_KV_FILE_HPP
#define PHX_KVCACHE_KV_FILE_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace phx::kvcache {

/// Makes @p path hold at least @p size bytes of the pattern: reused as it
/// is when already that long with the pattern at its start and at
/// size's end; else (re)written.  Returns true when it wrote.  Throws
/// std::system_error.
bool ensure_kv_file(const std::filesystem::path &path, std::uint64_t size);

}  // namespace phx::kvcache

#endif  // PHX_KVCACHE_KV_FILE_HPP
