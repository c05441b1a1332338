// SPDX-License-Identifier: MIT
// Pool slots handed out like a paged KV-cache allocator: a FIFO free list,
// so after a few sequences come and go a sequence's slots are no longer
// in order, as in a serving engine's block table.
#ifndef PHX_KVCACHE_SLOT_POOL_HPP
#define PHX_KVCACHE_SLOT_POOL_HPP

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace phx::kvcache {

class SlotPool {
 public:
  explicit SlotPool(std::uint64_t slots);
  /// @p count free slots, oldest freed first.  Throws std::length_error
  /// when fewer are free.
  [[nodiscard]] std::vector<std::uint64_t> take(std::size_t count);
  void give(std::span<const std::uint64_t> slots);
  [[nodiscard]] std::size_t free_slots() const noexcept { return free_.size(); }

 private:
  std::deque<std::uint64_t> free_;
};

}  // namespace phx::kvcache

#endif  // PHX_KVCACHE_SLOT_POOL_HPP
