// SPDX-License-Identifier: MIT
// Size and time parsing, and the engine table.
#include "options.hpp"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "common/units.hpp"
#include "engine.hpp"

namespace phxbench {
namespace {

using phxtools::parse_address;
using phxtools::parse_seconds;
using phxtools::parse_size;

TEST(Options, SizesArePowersOf1024) {
  EXPECT_EQ(parse_size("4096"), 4096U);
  EXPECT_EQ(parse_size("4K"), 4096U);
  EXPECT_EQ(parse_size("4k"), 4096U);
  EXPECT_EQ(parse_size("4KiB"), 4096U);
  EXPECT_EQ(parse_size("4KB"), 4096U);
  EXPECT_EQ(parse_size("16M"), 16ULL << 20);
  EXPECT_EQ(parse_size("1G"), 1ULL << 30);
  EXPECT_EQ(parse_size("10G"), 10ULL << 30);
  EXPECT_EQ(parse_size("1.5K"), 1536U);
  EXPECT_EQ(parse_size("2T"), 2ULL << 40);
  EXPECT_EQ(parse_size("0"), 0U);
}

TEST(Options, AddressesAreHexNumbersOrSizes) {
  EXPECT_EQ(parse_address("0xc000000"), 192ULL << 20);
  EXPECT_EQ(parse_address("0XC000000"), 192ULL << 20);
  EXPECT_EQ(parse_address("201326592"), 192ULL << 20);
  EXPECT_EQ(parse_address("192M"), 192ULL << 20);
  EXPECT_EQ(parse_address("0"), 0U);
  EXPECT_EQ(parse_address("0xffffffffffffffff"), ~0ULL);
}

TEST(Options, BadAddressesAreRefusedWithTheValue) {
  for (const char *bad : {"0x", "0xg1", "0x1 ", "0x10000000000000000", "-4", "4Q", ""}) {
    try {
      (void)parse_address(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Options, BadSizesAreRefusedWithTheValue) {
  for (const char *bad : {"", "K", "4Q", "-1", "1.3", "4KK", "1e30", "nan", "16 M"}) {
    try {
      (void)parse_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Options, Times) {
  EXPECT_DOUBLE_EQ(parse_seconds("10"), 10.0);
  EXPECT_DOUBLE_EQ(parse_seconds("2.5s"), 2.5);
  EXPECT_DOUBLE_EQ(parse_seconds("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(parse_seconds("2min"), 120.0);
  EXPECT_THROW((void)parse_seconds("3parsecs"), std::invalid_argument);
  EXPECT_THROW((void)parse_seconds("-1"), std::invalid_argument);
}

TEST(Engines, NamedOnceAndFoundByName) {
  std::set<std::string> names;
  for (const EngineEntry &e : engine_table()) {
    EXPECT_TRUE(names.insert(std::string(e.name)).second) << e.name;
    EXPECT_EQ(find_engine(e.name), &e);
    EXPECT_FALSE(e.summary.empty());
  }
  EXPECT_EQ(names, (std::set<std::string>{"direct", "compat", "cufile", "posix", "host"}));
  // The old spellings are read as aliases.
  EXPECT_EQ(find_engine("phoenix"), find_engine("direct"));
  EXPECT_EQ(find_engine("gds"), find_engine("cufile"));
  EXPECT_EQ(find_engine("uring"), nullptr);
  EXPECT_EQ(find_engine(""), nullptr);
}

}  // namespace
}  // namespace phxbench
