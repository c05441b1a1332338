// SPDX-License-Identifier: MIT
#include "pool_copy.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "gpu.hpp"

namespace phx::kvcache {

std::size_t copy_out_slots(const std::byte *pool, bool on_device, std::size_t block_size,
                           std::span<const std::uint64_t> slots, std::span<std::byte> out) {
  if (out.size() != slots.size() * block_size) {
    throw std::invalid_argument("copy_out_slots: " + std::to_string(out.size()) + " bytes for " +
                                std::to_string(slots.size()) + " blocks of " +
                                std::to_string(block_size));
  }
  std::size_t copies = 0;
  for (std::size_t i = 0; i < slots.size();) {
    std::size_t run = 1;
    while (i + run < slots.size() && slots[i + run] == slots[i] + run) {
      ++run;
    }
    const std::byte *from = pool + slots[i] * block_size;
    std::byte *to = out.data() + i * block_size;
    if (on_device) {
      gpu::to_host(to, from, run * block_size);
    } else {
      std::memcpy(to, from, run * block_size);
    }
    ++copies;
    i += run;
  }
  return copies;
}

}  // namespace phx::kvcache
