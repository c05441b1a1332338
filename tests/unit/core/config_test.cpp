// SPDX-License-Identifier: MIT
#include "core/config.hpp"

#include <gtest/gtest.h>

namespace phx::detail {
namespace {

TEST(ParseSize, AcceptsPlainAndBinarySuffixes) {
  EXPECT_EQ(parse_size("0"), 0U);
  EXPECT_EQ(parse_size("4096"), 4096U);
  EXPECT_EQ(parse_size("64K"), 64U << 10);
  EXPECT_EQ(parse_size("16M"), 16U << 20);
  EXPECT_EQ(parse_size("16MiB"), 16U << 20);
  EXPECT_EQ(parse_size("1G"), std::size_t{1} << 30);
}

TEST(ParseSize, RejectsGarbageAndOverflow) {
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("K"));
  EXPECT_FALSE(parse_size("-1"));
  EXPECT_FALSE(parse_size("12Q"));
  EXPECT_FALSE(parse_size("4 K"));
  EXPECT_FALSE(parse_size("99999999999999999999"));
  EXPECT_FALSE(parse_size("18446744073709551615G"));
}

}  // namespace
}  // namespace phx::detail
