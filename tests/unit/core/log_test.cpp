// SPDX-License-Identifier: MIT
// The library prints nothing unless PHX_LOG asks, and then says which engine
// a device got and why.
#include <gtest/gtest.h>
#include <stdlib.h>  // setenv/unsetenv

#include "phoenix/phoenix.hpp"

namespace phx {
namespace {

TEST(Log, SilentByDefault) {
  ::unsetenv("PHX_LOG");
  ::testing::internal::CaptureStderr();
  { auto dev = Device::open(0, Engine::host); }
  EXPECT_THROW((void)Device::open(-1), std::system_error);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(Log, InfoReportsTheEngineChoice) {
  ::setenv("PHX_LOG", "info", 1);
  ::testing::internal::CaptureStderr();
  { auto dev = Device::open(0, Engine::host); }
  const std::string out = ::testing::internal::GetCapturedStderr();
  ::unsetenv("PHX_LOG");
  EXPECT_NE(out.find("phoenix[info]: device 0: host engine (requested by the caller)"),
            std::string::npos)
      << out;
}

TEST(Log, ErrorLevelHidesInfo) {
  ::setenv("PHX_LOG", "error", 1);
  ::testing::internal::CaptureStderr();
  { auto dev = Device::open(0, Engine::host); }
  const std::string out = ::testing::internal::GetCapturedStderr();
  ::unsetenv("PHX_LOG");
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace phx
