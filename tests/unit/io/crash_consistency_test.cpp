// SPDX-License-Identifier: MIT
// Crash consistency of writes through the host engine: a writer process is
// SIGKILLed mid-way and the file must hold every request the library
// reported done, whole, and nothing but bytes of the requests it started
// (crash_writer.hpp states the claim; the rig runs the same check with the
// direct engine against phxfs.ko, tests/vm/fault/crash_direct_test.cpp).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "crash_writer.hpp"
#include "test_support.hpp"

namespace phx::test::crash {
namespace {

struct Variant {
  const char *name;
  unsigned depth;
  DirectIo direct;
};

class CrashConsistency : public ::testing::TestWithParam<Variant> {};

// The host engine's "device memory" is host memory registered with it.
Source host_source(const Plan &plan, AlignedBuffer &memory) {
  Device dev = Device::open(0, Engine::host);
  Registration reg = dev.register_memory(memory.data(), plan.depth * plan.request_size);
  return Source{std::move(dev), std::move(reg)};
}

TEST_P(CrashConsistency, KilledWriterLeavesOnlyWholeReportedRequestsAndTheirPrefix) {
  const Variant v = GetParam();
  TempDir dir;
  if (v.direct == DirectIo::required) {
    try {
      const File probe(dir / "probe", O_RDWR | O_CREAT, 0644, DirectIo::required);
    } catch (const std::system_error &e) {
      GTEST_SKIP() << "no O_DIRECT under " << dir.path() << ": " << e.what();
    }
  }
  int partial = 0;
  constexpr int kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    Plan plan;
    plan.depth = v.depth;
    plan.direct = v.direct;
    plan.seed = 1000 + static_cast<std::uint64_t>(round);
    plan.kill_after = 1 + static_cast<std::size_t>(round) * 3;
    // Far more than the parent waits for: the writer is killed while it
    // still has work, never after finishing.
    plan.requests = plan.kill_after + 128;
    AlignedBuffer memory(plan.depth * plan.request_size);
    // Not "f" + std::to_string(round): GCC 12 at -O3 warns a false
    // -Wrestrict on operator+(const char *, string &&) (GCC bug 105651).
    std::string name = "f";
    name += std::to_string(round);
    const auto path = dir / name;
    const Outcome out =
        run_and_kill(plan, path, [&memory](const Plan &p) { return host_source(p, memory); });
    ASSERT_TRUE(out.child_error.empty()) << "writer failed: " << out.child_error;
    ASSERT_TRUE(out.killed) << "the writer was not killed mid-way (exit status " << out.exit_status
                            << ")";
    ASSERT_GE(out.reported.size(), plan.kill_after);
    const std::string why = check_file(plan, path, out.reported);
    EXPECT_EQ(why, "") << "round " << round << ", " << out.reported.size()
                       << " requests reported done";
    partial += partial_requests(plan, path) > 0 ? 1 : 0;
  }
  // Where the kill lands is up to the scheduler; say how often it cut a request.
  std::printf("%s: %d of %d kills left a request partly written\n", v.name, partial, kRounds);
}

INSTANTIATE_TEST_SUITE_P(HostEngine, CrashConsistency,
                         ::testing::Values(Variant{"Buffered", 1, DirectIo::off},
                                           Variant{"Direct", 1, DirectIo::required},
                                           Variant{"QueuedBuffered", 8, DirectIo::off},
                                           Variant{"QueuedDirect", 8, DirectIo::required}),
                         [](const auto &param_info) { return std::string(param_info.param.name); });

// The checker itself must catch each kind of damage it claims to.
class CrashChecker : public ::testing::Test {
 protected:
  static constexpr std::size_t kReq = 8192;
  void SetUp() override {
    plan_.request_size = kReq;
    plan_.requests = 16;
    plan_.seed = 7;
    plan_.depth = 1;
  }
  void write(const std::vector<std::byte> &data) {
    const int fd = ::open((dir_ / "f").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ::close(fd);
  }
  std::vector<std::byte> stream(std::size_t bytes) const {
    std::vector<std::byte> v(bytes);
    fill_pattern(v, plan_.seed, 0);
    return v;
  }
  std::string check(const std::vector<std::uint64_t> &reported) const {
    return check_file(plan_, dir_ / "f", reported);
  }
  TempDir dir_;
  Plan plan_;
};

TEST_F(CrashChecker, AcceptsReportedRequestsPlusAPrefixOfTheNext) {
  write(stream(3 * kReq + 100));
  EXPECT_EQ(check({0, 1, 2}), "");
  EXPECT_EQ(partial_requests(plan_, dir_ / "f"), 1U);
}

TEST_F(CrashChecker, RejectsAMissingReportedRequest) {
  write(stream(2 * kReq));
  EXPECT_NE(check({0, 1, 2}).find("request 2 reported done but the file ends"), std::string::npos);
}

TEST_F(CrashChecker, RejectsAWrongByte) {
  auto data = stream(2 * kReq);
  data[kReq + 5] = ~data[kReq + 5] == std::byte{0} ? std::byte{1} : ~data[kReq + 5];
  write(data);
  const std::string why = check({0, 1});
  EXPECT_NE(why.find("request 1 reported done but byte 8197"), std::string::npos) << why;
  EXPECT_NE(why.find("neither the request's byte"), std::string::npos) << why;
}

TEST_F(CrashChecker, RejectsDataBeyondTheRequestsStarted) {
  write(stream(4 * kReq));  // two reported, depth 1: at most three started
  EXPECT_NE(check({0, 1}).find("at most 24576 can have been written"), std::string::npos);
}

TEST_F(CrashChecker, DepthOneRejectsAHoleButQueuedAcceptsIt) {
  auto data = stream(3 * kReq);
  std::fill(data.begin() + kReq, data.begin() + 2 * kReq, std::byte{0});  // request 1 unwritten
  write(data);
  EXPECT_NE(check({0}).find("not a prefix"), std::string::npos);
  plan_.depth = 4;
  EXPECT_EQ(check({0, 2}), "");
}

}  // namespace
}  // namespace phx::test::crash
