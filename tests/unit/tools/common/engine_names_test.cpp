// SPDX-License-Identifier: MIT
#include "common/engine_names.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace phxtools {
namespace {

TEST(EngineNames, LibraryNamesAreCanonical) {
  for (const char *name : {"auto", "direct", "host", "compat", "cufile"}) {
    EXPECT_EQ(canonical_engine(name), name);
  }
}

TEST(EngineNames, OldSpellingsAreAliases) {
  EXPECT_EQ(canonical_engine("phoenix"), "direct");
  EXPECT_EQ(canonical_engine("gds"), "cufile");
  EXPECT_EQ(canonical_engine("automatic"), "auto");
  EXPECT_EQ(library_engine("phoenix"), phx::Engine::direct);
}

TEST(EngineNames, ToolBaselinesKeepTheirNames) {
  EXPECT_EQ(canonical_engine("posix"), "posix");
  EXPECT_EQ(canonical_engine("pinned"), "pinned");
  EXPECT_FALSE(library_engine("posix").has_value());
}

TEST(EngineNames, ParseChecksTheKnownNames) {
  const std::vector<std::string> known{"direct", "cufile", "posix"};
  EXPECT_EQ(parse_engine_name("gds", known), "cufile");
  EXPECT_EQ(parse_engine_name("posix", known), "posix");
  try {
    (void)parse_engine_name("host", known);
    FAIL() << "host is not among the known names";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("direct, cufile or posix"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace phxtools
