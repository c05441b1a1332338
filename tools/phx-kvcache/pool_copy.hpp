// SPDX-License-Identifier: MIT
// Reading pool slots back for --verify: one copy per run of consecutive
// slots rather than one per block.
#ifndef PHX_KVCACHE_POOL_COPY_HPP
#define PHX_KVCACHE_POOL_COPY_HPP

#include <cstddef>
#include <cstdint>
#include <span>

namespace phx::kvcache {

/// Copies pool slot slots[i] (@p block_size bytes at pool + slots[i] *
/// block_size) to out[i * block_size], for every i; a run of consecutive
/// slots is one copy.  @p on_device: the pool is GPU memory (synchronous
/// device-to-host copies), else host memory.  Throws std::invalid_argument
/// when out is not slots.size() blocks, Unavailable / std::runtime_error
/// from the GPU copies.  Returns the copies made.
std::size_t copy_out_slots(const std::byte *pool, bool on_device, std::size_t block_size,
                           std::span<const std::uint64_t> slots, std::span<std::byte> out);

}  // namespace phx::kvcache

#endif  // PHX_KVCACHE_POOL_COPY_HPP
