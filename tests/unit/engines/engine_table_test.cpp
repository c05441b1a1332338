// SPDX-License-Identifier: MIT
// The engine table (lib/engines/engine_table.cpp): every row's names and C
// value round-trip through the C and C++ APIs, and what a device reports
// is its row's capabilities.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "engines/engine_table.hpp"
#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"

namespace phx::detail {
namespace {

bool same(const EngineCapabilities &a, const EngineCapabilities &b) {
  return a.device_memory == b.device_memory && a.host_view == b.host_view &&
         a.io_queue == b.io_queue && a.gather == b.gather && a.staged == b.staged;
}

TEST(EngineTable, EveryRowRoundTrips) {
  ASSERT_FALSE(engine_table().empty());
  for (const EngineEntry &e : engine_table()) {
    SCOPED_TRACE(std::string(e.name));
    EXPECT_EQ(to_string(e.engine), e.name);
    EXPECT_EQ(parse_engine(e.name), e.engine);
    for (std::string_view alias : e.aliases) {
      if (!alias.empty()) {
        EXPECT_EQ(parse_engine(alias), e.engine) << alias;
      }
    }
    EXPECT_EQ(find_engine(e.c_value), &e);
    EXPECT_STREQ(phxfs_engine_name(e.c_value), std::string(e.name).c_str());
    EXPECT_EQ(e.make == nullptr, e.engine == Engine::automatic);
    EXPECT_EQ(e.detect == nullptr, e.detect_order == 0);
    if (e.make != nullptr) {
      EXPECT_TRUE(same(engine_capabilities(e.engine), e.capabilities));
      // io_uring needs the memory's address in this process.
      EXPECT_TRUE(!e.capabilities.io_queue || e.capabilities.host_view);
    }
  }
}

TEST(EngineTable, ToolNamesAreAliases) {
  EXPECT_EQ(parse_engine("automatic"), Engine::automatic);
  EXPECT_EQ(parse_engine("phoenix"), Engine::direct);
  EXPECT_EQ(parse_engine("gds"), Engine::cufile);
}

TEST(EngineTable, UnknownNameIsEinvalWithTheNameAndTheChoices) {
  try {
    (void)parse_engine("gpu-magic");
    FAIL() << "expected EINVAL";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_NE(std::string(e.what()).find("gpu-magic"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(expected auto, direct, host, compat or cufile)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(find_engine(static_cast<phxfs_engine_t>(99)), nullptr);
  EXPECT_STREQ(phxfs_engine_name(static_cast<phxfs_engine_t>(99)), "unknown");
}

TEST(EngineTable, AutomaticHasNoCapabilitiesOfItsOwn) {
  try {
    (void)engine_capabilities(Engine::automatic);
    FAIL() << "expected EINVAL";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EINVAL);
  }
}

TEST(EngineTable, DeviceReportsItsEnginesCapabilities) {
  const Device dev = Device::open(0, Engine::host);
  EXPECT_TRUE(same(dev.capabilities(), engine_capabilities(Engine::host)));
  EXPECT_TRUE(dev.capabilities().host_view);
  EXPECT_FALSE(dev.capabilities().device_memory);
}

TEST(EngineTable, RefusalIsEnotsupNamingEngineAndCapability) {
  try {
    refuse(Engine::cufile, "phx::Gather", "gather mover", "use File::read/write");
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), ENOTSUP);
    EXPECT_NE(std::string(e.what()).find(
                  "phx::Gather: the cufile engine has no gather mover; use File::read/write"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace phx::detail
