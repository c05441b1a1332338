// SPDX-License-Identifier: MIT
// The verification pattern: position-dependent, so data from the wrong
// offset fails, and the fast word path agrees with the byte definition.
#include "common/pattern.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace phxtools {
namespace {

TEST(Pattern, FillMatchesBytewiseDefinitionAtAnyAlignment) {
  for (const std::uint64_t offset : {0ULL, 1ULL, 7ULL, 8ULL, 4095ULL, 1ULL << 40}) {
    for (const std::size_t size : {0UL, 1UL, 9UL, 64UL, 4097UL}) {
      std::vector<std::byte> buf(size);
      fill_pattern(buf, offset);
      for (std::size_t i = 0; i < size; ++i) {
        ASSERT_EQ(buf[i], pattern_byte(offset + i)) << offset << "+" << i;
      }
      EXPECT_FALSE(find_mismatch(buf, offset).has_value());
    }
  }
}

TEST(Pattern, FindsTheFirstWrongByte) {
  std::vector<std::byte> buf(8192);
  fill_pattern(buf, 4096);
  buf[5000] ^= std::byte{0x10};
  buf[6000] ^= std::byte{0x01};
  const auto bad = find_mismatch(buf, 4096);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(*bad, 4096U + 5000U);
}

TEST(Pattern, DataFromAnotherOffsetFails) {
  std::vector<std::byte> buf(4096);
  // Block-sized, word-sized and byte-sized displacements are all caught,
  // as is a block of zeros.
  for (const std::uint64_t wrong : {0ULL, 8ULL, 4095ULL, 4097ULL, 8192ULL, 1ULL << 30}) {
    fill_pattern(buf, wrong);
    EXPECT_TRUE(find_mismatch(buf, 4096).has_value()) << wrong;
  }
  std::fill(buf.begin(), buf.end(), std::byte{0});
  EXPECT_TRUE(find_mismatch(buf, 4096).has_value());
}

}  // namespace
}  // namespace phxtools
