// SPDX-License-Identifier: MIT
// phx::Options: the environment read once, one meaning per variable, ranges
// checked with the offending name, and a device keeping the options it was
// opened with.
#include "core/options.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>  // setenv/unsetenv are POSIX, not in <cstdlib>

#include <cerrno>
#include <initializer_list>
#include <string>
#include <system_error>

#include "phoenix/phoenix.hpp"

namespace phx {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

const char *const kVariables[] = {
    "PHX_ENGINE",         "PHX_QUEUE_DEPTH", "PHX_STAGING_SIZE",      "PHX_COPY_THREADS",
    "PHX_COPY_DEPTH",     "PHX_COPY_CHUNK",  "PHX_COPY_DIRECT_CHUNK", "PHX_STREAM_WORKERS",
    "PHX_STREAM_STAGING", "PHX_CHUNK_SIZE",  "PHX_NTHREADS",          "PHX_READ_CACHE",
    "PHX_COPY_SPIN_US",   "PHX_STREAM_LANES"};

class OptionsTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char *name : kVariables) {
      ::unsetenv(name);
    }
    detail::refresh_default_options();
  }
};

template <typename Call>
std::string einval_text(Call call) {
  try {
    call();
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EINVAL) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected EINVAL";
  return {};
}

TEST_F(OptionsTest, WithoutVariablesTheEnvironmentGivesTheBuiltInDefaults) {
  EXPECT_EQ(Options::from_environment(), Options{});
  EXPECT_EQ(Options::defaults(), Options{});
  const Options o;
  EXPECT_EQ(o.engine, Engine::automatic);
  EXPECT_EQ(o.queue_depth, 128U);
  EXPECT_EQ(o.staging_bytes, 4 * kMiB);
  EXPECT_EQ(o.copy_threads, 12U);
  EXPECT_EQ(o.copy_depth, 2U);
  EXPECT_EQ(o.copy_chunk, 4 * kMiB);
  EXPECT_EQ(o.copy_direct_chunk, 16 * kMiB);
  EXPECT_EQ(o.copy_spin_us, 100U);
  // One lane per staging slot of a stream-ordered read (copy_depth x 2).
  EXPECT_EQ(o.stream_lanes, 4U);
  EXPECT_EQ(o.stream_lanes, 2 * o.copy_depth);
  EXPECT_NO_THROW(o.validate());
}

TEST_F(OptionsTest, EachVariableSetsItsOwnField) {
  ::setenv("PHX_ENGINE", "host", 1);
  ::setenv("PHX_QUEUE_DEPTH", "7", 1);
  ::setenv("PHX_STAGING_SIZE", "64K", 1);
  ::setenv("PHX_COPY_THREADS", "3", 1);
  ::setenv("PHX_COPY_DEPTH", "5", 1);
  ::setenv("PHX_COPY_CHUNK", "1M", 1);
  ::setenv("PHX_COPY_DIRECT_CHUNK", "10000", 1);  // rounded up to whole pages
  ::setenv("PHX_STREAM_WORKERS", "9", 1);
  ::setenv("PHX_STREAM_STAGING", "32M", 1);
  ::setenv("PHX_STREAM_LANES", "3", 1);
  ::setenv("PHX_COPY_SPIN_US", "0", 1);  // the bottom of its range: sleep at once
  const Options o = Options::from_environment();
  EXPECT_EQ(o.engine, Engine::host);
  EXPECT_EQ(o.queue_depth, 7U);
  EXPECT_EQ(o.staging_bytes, 64U << 10);
  EXPECT_EQ(o.copy_threads, 3U);
  EXPECT_EQ(o.copy_depth, 5U);
  EXPECT_EQ(o.copy_chunk, kMiB);
  EXPECT_EQ(o.copy_direct_chunk, 12288U);
  EXPECT_EQ(o.stream_workers, 9U);
  EXPECT_EQ(o.stream_staging_bytes, 32 * kMiB);
  EXPECT_EQ(o.stream_lanes, 3U);
  EXPECT_EQ(o.copy_spin_us, 0U);
  EXPECT_NO_THROW(o.validate());
}

// The old names keep their old meaning; the new ones win where both are set.
TEST_F(OptionsTest, DeprecatedNamesStillWorkAndLose) {
  ::setenv("PHX_CHUNK_SIZE", "8M", 1);
  ::setenv("PHX_NTHREADS", "4", 1);
  Options o = Options::from_environment();
  EXPECT_EQ(o.staging_bytes, 8 * kMiB);
  EXPECT_EQ(o.copy_chunk, 8 * kMiB);
  EXPECT_EQ(o.copy_direct_chunk, 8 * kMiB);
  EXPECT_EQ(o.copy_threads, 4U);
  ::setenv("PHX_COPY_CHUNK", "2M", 1);
  ::setenv("PHX_COPY_THREADS", "6", 1);
  o = Options::from_environment();
  EXPECT_EQ(o.staging_bytes, 8 * kMiB);
  EXPECT_EQ(o.copy_chunk, 2 * kMiB);
  EXPECT_EQ(o.copy_threads, 6U);
}

TEST_F(OptionsTest, MalformedOrOutOfRangeNamesTheVariable) {
  for (const auto &[name, value] :
       {std::pair{"PHX_QUEUE_DEPTH", "0"}, std::pair{"PHX_QUEUE_DEPTH", "40000"},
        std::pair{"PHX_STAGING_SIZE", "12"}, std::pair{"PHX_COPY_CHUNK", "lots"},
        std::pair{"PHX_COPY_DEPTH", "1"}, std::pair{"PHX_STREAM_WORKERS", "0"},
        std::pair{"PHX_COPY_SPIN_US", "10001"}, std::pair{"PHX_ENGINE", "warp-drive"}}) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    ::setenv(name, value, 1);
    const std::string text = einval_text([] { (void)Options::from_environment(); });
    EXPECT_NE(text.find(value), std::string::npos) << text;
    ::unsetenv(name);
  }
  // Counts are whole numbers, not sizes: no byte suffix, none in the words.
  for (const auto &[name, value] :
       {std::pair{"PHX_COPY_DEPTH", "1"}, std::pair{"PHX_COPY_THREADS", "4K"},
        std::pair{"PHX_QUEUE_DEPTH", "-3"}, std::pair{"PHX_STREAM_WORKERS", "2000"}}) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    ::setenv(name, value, 1);
    const std::string text = einval_text([] { (void)Options::from_environment(); });
    EXPECT_NE(text.find("whole number"), std::string::npos) << text;
    EXPECT_EQ(text.find("bytes"), std::string::npos) << text;
    ::unsetenv(name);
  }
}

// Read once: a later change reaches defaults() only through a refresh.
TEST_F(OptionsTest, DefaultsAreReadOnce) {
  EXPECT_EQ(Options::defaults().queue_depth, 128U);
  ::setenv("PHX_QUEUE_DEPTH", "32", 1);
  EXPECT_EQ(Options::defaults().queue_depth, 128U);
  EXPECT_EQ(IoQueue().depth(), 128U);
  detail::refresh_default_options();
  EXPECT_EQ(Options::defaults().queue_depth, 32U);
  EXPECT_EQ(IoQueue().depth(), 32U);
  EXPECT_EQ(IoQueue(5).depth(), 5U);  // a call's own value wins
}

TEST_F(OptionsTest, ValidateNamesTheField) {
  const auto bad = [](auto change) {
    Options o;
    change(o);
    return einval_text([&] { o.validate(); });
  };
  EXPECT_NE(bad([](Options &o) { o.queue_depth = 0; }).find("queue_depth"), std::string::npos);
  EXPECT_NE(bad([](Options &o) { o.staging_bytes = 100; }).find("staging_bytes"),
            std::string::npos);
  EXPECT_NE(bad([](Options &o) { o.copy_threads = 1000; }).find("copy_threads"), std::string::npos);
  EXPECT_NE(bad([](Options &o) { o.copy_depth = 0; }).find("copy_depth"), std::string::npos);
  EXPECT_NE(bad([](Options &o) { o.copy_spin_us = 20000; }).find("copy_spin_us"),
            std::string::npos);
  EXPECT_NE(
      bad([](Options &o) { o.copy_direct_chunk = std::size_t{2} << 30; }).find("copy_direct_chunk"),
      std::string::npos);
  EXPECT_NE(bad([](Options &o) { o.stream_workers = 0; }).find("stream_workers"),
            std::string::npos);
  EXPECT_NE(bad([](Options &o) { o.stream_staging_bytes = 0; }).find("stream_staging_bytes"),
            std::string::npos);
  EXPECT_NE(bad([](Options &o) { o.stream_lanes = 0; }).find("stream_lanes"), std::string::npos);
  EXPECT_NE(bad([](Options &o) { o.stream_lanes = 65; }).find("stream_lanes"), std::string::npos);
  EXPECT_NE(bad([](Options &o) { o.engine = static_cast<Engine>(42); }).find("engine"),
            std::string::npos);
}

TEST_F(OptionsTest, DeviceKeepsItsOptions) {
  Options o = Options::defaults();
  o.engine = Engine::host;
  o.queue_depth = 3;
  o.staging_bytes = 256U << 10;
  const Device dev = Device::open(0, o);
  EXPECT_EQ(dev.options(), o);
  EXPECT_EQ(dev.engine(), Engine::host);
  o.queue_depth = 0;
  EXPECT_NE(einval_text([&] { (void)Device::open(1, o); }).find("queue_depth"), std::string::npos);
  // Device::open(id, engine) takes the process defaults.
  EXPECT_EQ(Device::open(2, Engine::host).options().queue_depth, Options::defaults().queue_depth);
}

// PHX_ENGINE still says why a device got its engine.
TEST_F(OptionsTest, EnvironmentEngineIsTheReason) {
  ::setenv("PHX_ENGINE", "host", 1);
  detail::refresh_default_options();
  const Device dev = Device::open(0);
  EXPECT_EQ(dev.engine(), Engine::host);
  EXPECT_EQ(dev.engine_reason(), "PHX_ENGINE=host");
  EXPECT_EQ(choose_engine(0).reason, "PHX_ENGINE=host");
}

// set_defaults() replaces what the environment gave, for what opens next;
// a value out of range changes nothing.
TEST_F(OptionsTest, SetDefaultsIsWhatOpensNext) {
  ::setenv("PHX_COPY_THREADS", "3", 1);
  EXPECT_EQ(Options::defaults().copy_threads, 3U);
  Options o = Options::defaults();
  o.copy_threads = 5;
  o.engine = Engine::host;
  Options::set_defaults(o);
  EXPECT_EQ(Options::defaults(), o);
  const Device dev = Device::open(0);
  EXPECT_EQ(dev.engine(), Engine::host);
  EXPECT_EQ(dev.options().copy_threads, 5U);
  EXPECT_NE(dev.engine_reason().find("set as the default"), std::string::npos)
      << dev.engine_reason();
  Options bad = o;
  bad.copy_threads = 0;
  EXPECT_NE(einval_text([&] { Options::set_defaults(bad); }).find("copy_threads"),
            std::string::npos);
  EXPECT_EQ(Options::defaults(), o);
  // Back to the environment as read now.
  detail::refresh_default_options();
  EXPECT_EQ(Options::defaults().copy_threads, 3U);
}

}  // namespace
}  // namespace phx
