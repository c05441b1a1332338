// SPDX-License-Identifier: MIT
// phx-kvcache's read-back for --verify: every slot's block lands at its
// place in the output, and a run of consecutive slots is one copy.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "pool_copy.hpp"

namespace {

constexpr std::size_t kBlock = 4096;

// Byte j of slot s: distinct per slot and per position.
std::byte pattern(std::uint64_t slot, std::size_t j) {
  return static_cast<std::byte>((slot * 131 + j * 7 + 1) & 0xff);
}

std::vector<std::byte> make_pool(std::size_t slots) {
  std::vector<std::byte> pool(slots * kBlock);
  for (std::uint64_t s = 0; s < slots; ++s) {
    for (std::size_t j = 0; j < kBlock; ++j) {
      pool[s * kBlock + j] = pattern(s, j);
    }
  }
  return pool;
}

void expect_blocks(const std::vector<std::byte> &out, const std::vector<std::uint64_t> &slots) {
  for (std::size_t i = 0; i < slots.size(); ++i) {
    for (std::size_t j = 0; j < kBlock; ++j) {
      ASSERT_EQ(out[i * kBlock + j], pattern(slots[i], j)) << "block " << i << " byte " << j;
    }
  }
}

TEST(KvcachePoolCopy, RunsOfConsecutiveSlotsAreOneCopyEach) {
  const std::vector<std::byte> pool = make_pool(16);
  const std::vector<std::uint64_t> slots = {3, 4, 5, 0, 1, 9, 15, 14};
  std::vector<std::byte> out(slots.size() * kBlock);
  EXPECT_EQ(phx::kvcache::copy_out_slots(pool.data(), false, kBlock, slots, out), 5U);
  expect_blocks(out, slots);
}

TEST(KvcachePoolCopy, OneRunIsOneCopy) {
  const std::vector<std::byte> pool = make_pool(8);
  const std::vector<std::uint64_t> slots = {2, 3, 4, 5, 6, 7};
  std::vector<std::byte> out(slots.size() * kBlock);
  EXPECT_EQ(phx::kvcache::copy_out_slots(pool.data(), false, kBlock, slots, out), 1U);
  expect_blocks(out, slots);
}

TEST(KvcachePoolCopy, RepeatedSlotIsNotARun) {
  const std::vector<std::byte> pool = make_pool(4);
  const std::vector<std::uint64_t> slots = {1, 1, 2};
  std::vector<std::byte> out(slots.size() * kBlock);
  EXPECT_EQ(phx::kvcache::copy_out_slots(pool.data(), false, kBlock, slots, out), 2U);
  expect_blocks(out, slots);
}

TEST(KvcachePoolCopy, OutputOfTheWrongSizeIsRefused) {
  const std::vector<std::byte> pool = make_pool(4);
  const std::vector<std::uint64_t> slots = {0, 1};
  std::vector<std::byte> out(kBlock);
  EXPECT_THROW((void)phx::kvcache::copy_out_slots(pool.data(), false, kBlock, slots, out),
               std::invalid_argument);
}

}  // namespace
