// SPDX-License-Identifier: MIT
#include "slot_pool.hpp"

#include <stdexcept>
#include <string>

namespace phx::kvcache {

SlotPool::SlotPool(std::uint64_t slots) {
  for (std::uint64_t s = 0; s < slots; ++s) {
    free_.push_back(s);
  }
}

std::vector<std::uint64_t> SlotPool::take(std::size_t count) {
  if (count > free_.size()) {
    throw std::length_error("the pool has " + std::to_string(free_.size()) +
                            " free slots, a sequence needs " + std::to_string(count) +
                            " (raise --pool-blocks)");
  }
  std::vector<std::uint64_t> out(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(count));
  free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(count));
  return out;
}

void SlotPool::give(std::span<const std::uint64_t> slots) {
  free_.insert(free_.end(), slots.begin(), slots.end());
}

}  // namespace phx::kvcache
