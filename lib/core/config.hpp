// SPDX-License-Identifier: MIT
// Environment configuration (PHX_*).  Read where it is used, so a process
// that changes its environment between opens sees the change.
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

/// The variable's value, or nullopt when unset or empty.
[[nodiscard]] std::optional<std::string_view> env_string(const char *name);

/// Staging buffer for unaligned pieces and misaligned memory (PHX_CHUNK_SIZE).
inline constexpr std::size_t kDefaultChunkSize = std::size_t{4} << 20;
/// io_uring entries per IoQueue (PHX_QUEUE_DEPTH).
inline constexpr std::size_t kDefaultQueueDepth = 128;
/// Largest single read/write syscall; the kernel caps one at MAX_RW_COUNT
/// (INT_MAX rounded down to a page), and io_uring's length field is 32 bits.
inline constexpr std::size_t kMaxSyscallBytes = std::size_t{1} << 30;

[[nodiscard]] std::size_t chunk_size_from_env();

// Compat engine defaults (PHX_NTHREADS, PHX_CHUNK_SIZE, PHX_QUEUE_DEPTH),
// chosen by measurement on an H200 (docs/gpu.md).
/// Copy threads per device.  8 to 16 threads with 4 MiB chunks all reached
/// 50-52 GB/s warm on the H200 (16 cores), against 27-34 GB/s with 16-32 MiB:
/// small chunks stay in the CPU caches between the read and the DMA.
inline constexpr std::size_t kDefaultCompatThreads = 12;
/// Bytes per chunk: one pread/pwrite and one copy.
inline constexpr std::size_t kDefaultCompatChunk = std::size_t{4} << 20;
/// Chunk for O_DIRECT descriptors when PHX_CHUNK_SIZE is unset: the disk
/// wants more bytes in flight (cold, O_DIRECT, H200's virtio disk: 1.2 GB/s
/// with 4 MiB chunks, 1.7 GB/s with 16 MiB, the read-to-pinned ceiling).
inline constexpr std::size_t kDefaultCompatDirectChunk = std::size_t{16} << 20;
/// Chunks in flight per copy thread (PHX_QUEUE_DEPTH = this x threads).
inline constexpr std::size_t kDefaultCompatDepth = 2;

}  // namespace phx::detail

#endif  // PHOENIX_LIB_CONFIG_HPP
