// SPDX-License-Identifier: MIT
#include "core/config.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>  // setenv/unsetenv are POSIX, not in <cstdlib>

#include <cerrno>
#include <system_error>

#include "phoenix/phoenix.hpp"

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

class EnvTest : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv("PHX_CHUNK_SIZE"); }
};

TEST_F(EnvTest, EnvSizeFallsBackWhenUnset) {
  ::unsetenv("PHX_CHUNK_SIZE");
  EXPECT_EQ(chunk_size_from_env(), kDefaultChunkSize);
}

TEST_F(EnvTest, EnvSizeParsesValue) {
  ::setenv("PHX_CHUNK_SIZE", "8M", 1);
  EXPECT_EQ(chunk_size_from_env(), 8U << 20);
}

TEST_F(EnvTest, EnvSizeRejectsOutOfRangeNamingTheVariable) {
  ::setenv("PHX_CHUNK_SIZE", "12", 1);
  try {
    (void)chunk_size_from_env();
    FAIL() << "expected EINVAL";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_NE(std::string(e.what()).find("PHX_CHUNK_SIZE=12"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace phx::detail
