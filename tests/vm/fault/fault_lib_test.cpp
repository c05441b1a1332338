// SPDX-License-Identifier: MIT
// The fault suite's libphoenix part, in the rig's guest against the real
// phxfs.ko (fault.sh loads it with the PCI BAR provider on every ivshmem
// device; device 1's BAR bytes [144, 160) MiB belong to the fault suite).
//
// CrashDirect: the crash-consistency check of tests/unit/crash_writer.hpp
// with the direct engine: a writer copies from device memory into an ext4
// file and is SIGKILLed mid-way; after dropping the page cache the file
// must hold every request reported done, whole, and nothing foreign.
//
// DeviceMapper: reads and writes through the direct engine on device-mapper
// targets that fail mid-transfer (fault.sh builds them with dmsetup):
//   PHX_DM_ERROR   [0, 8) MiB linear on the raw disk's [200, 208) MiB,
//                  [8, 9) MiB error, [9, 17) MiB linear on [208, 216) MiB;
//   PHX_DM_DISCARD the same with flakey targets that are always down and
//                  drop writes instead of linear: reads pass to the disk,
//                  writes succeed and go nowhere (the raw disk is never
//                  written);
//   PHX_DM_FLAKEY  16 MiB flakey on the raw disk's [216, 232) MiB, up 1 s,
//                  down 1 s (all I/O fails while down).
// The claim: a failure is reported (IoError, EIO, naming file, offset and
// size) with bytes_done never past the first failing byte, and every byte
// reported as read equals the disk's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "crash_writer.hpp"
#include "phoenix/phoenix.hpp"

namespace {

constexpr int kDevice = 1;
constexpr std::uint64_t kFaultBase = 144ULL << 20;  // [144, 160) MiB of device 1
constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::size_t kKiB = 1024;

void *dev_addr(std::uint64_t offset) {
  // The pcibar provider's device addresses are BAR offsets.
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  return reinterpret_cast<void *>(kFaultBase + offset);
}

const char *env(const char *name) {
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before any thread starts
}

void drop_caches() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "3\n", 2), 2);
  ::close(fd);
}

// ---------------------------------------------------------------------------
using phx::test::crash::Outcome;
using phx::test::crash::Plan;
using phx::test::crash::Source;

struct Variant {
  const char *name;
  unsigned depth;
  phx::DirectIo direct;
};

class CrashDirect : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    const char *dir = env("PHX_EXT4_DIR");
    if (dir == nullptr || env("PHX_PCIBAR_BDFS") == nullptr) {
      GTEST_SKIP() << "needs the rig's PHX_EXT4_DIR and PHX_PCIBAR_BDFS";
    }
    dir_ = std::filesystem::path(dir) / "phx" / "fault";
    std::filesystem::create_directories(dir_);
  }
  std::filesystem::path dir_;
};

TEST_P(CrashDirect, KilledWriterLeavesOnlyWholeReportedRequestsAndTheirPrefix) {
  const Variant v = GetParam();
  constexpr int kRounds = 4;
  int partial = 0;
  for (int round = 0; round < kRounds; ++round) {
    Plan plan;
    plan.request_size = 128 * kKiB;
    plan.depth = v.depth;
    plan.direct = v.direct;
    plan.seed = 500 + static_cast<std::uint64_t>(round);
    plan.kill_after = 1 + static_cast<std::size_t>(round) * 5;
    plan.requests = plan.kill_after + 64;
    // Each round its own 1 MiB of the BAR: a killed writer's registration
    // may still be torn down when the next round registers.
    const std::uint64_t region =
        (static_cast<std::uint64_t>(v.depth > 1 ? 1 : 0) * kRounds + round) * kMiB +
        (v.direct == phx::DirectIo::off ? 8 * kMiB : 0);
    const auto path = dir_ / (std::string("crash-") + v.name + std::to_string(round) + ".bin");
    const Outcome out = run_and_kill(plan, path, [region](const Plan &p) {
      phx::Device dev = phx::Device::open(kDevice, phx::Engine::direct);
      phx::Registration reg = dev.register_memory(dev_addr(region), p.depth * p.request_size);
      return Source{std::move(dev), std::move(reg)};
    });
    ASSERT_TRUE(out.child_error.empty()) << "writer failed: " << out.child_error;
    ASSERT_TRUE(out.killed) << "the writer was not killed mid-way (exit " << out.exit_status << ")";
    // What any reader sees now, and what the disk holds once the page cache is gone.
    EXPECT_EQ(check_file(plan, path, out.reported), "") << "round " << round << ", page cache";
    drop_caches();
    EXPECT_EQ(check_file(plan, path, out.reported), "") << "round " << round << ", from disk";
    partial += partial_requests(plan, path) > 0 ? 1 : 0;
  }
  std::printf("%s: %d of %d kills left a request partly written\n", v.name, partial, kRounds);
}

INSTANTIATE_TEST_SUITE_P(DirectEngine, CrashDirect,
                         ::testing::Values(Variant{"Direct", 1, phx::DirectIo::required},
                                           Variant{"QueuedDirect", 8, phx::DirectIo::required},
                                           Variant{"Buffered", 1, phx::DirectIo::off}),
                         [](const auto &param_info) { return std::string(param_info.param.name); });

// ---------------------------------------------------------------------------
class DeviceMapper : public ::testing::Test {
 protected:
  static constexpr std::uint64_t kBad = 8 * kMiB;  // first failing byte of the error devices
  static constexpr std::uint64_t kBadEnd = 9 * kMiB;
  static constexpr std::uint64_t kErrorSize = 17 * kMiB;

  void SetUp() override {
    raw_ = env("PHX_RAW_DEV") != nullptr ? env("PHX_RAW_DEV") : "";
    if (raw_.empty() || env("PHX_DM_ERROR") == nullptr) {
      GTEST_SKIP() << "needs the rig and fault.sh's device-mapper targets (PHX_DM_ERROR)";
    }
    dev_.emplace(phx::Device::open(kDevice, phx::Engine::direct));
    // Device 1's [152, 160) MiB.
    reg_ = dev_->register_memory(dev_addr(8 * kMiB), 8 * kMiB);
  }

  // The raw disk's bytes behind byte @p at of the error device.
  std::vector<std::byte> disk_behind(std::uint64_t at, std::size_t n, std::uint64_t raw_base) {
    std::vector<std::byte> out(n);
    const int fd = ::open(raw_.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, out.data(), n, static_cast<off_t>(raw_base + at)),
              static_cast<ssize_t>(n));
    ::close(fd);
    return out;
  }
  std::vector<std::byte> error_dev_bytes(std::uint64_t at, std::size_t n) {
    // Only ranges entirely below or above the bad MiB.
    return at < kBad ? disk_behind(at, n, 200 * kMiB) : disk_behind(at - kBadEnd, n, 208 * kMiB);
  }

  std::string raw_;
  std::optional<phx::Device> dev_;
  phx::Registration reg_;
};

// A read running from good into bad sectors: an IoError naming the file,
// offset and size, with bytes_done never past the first bad byte, and every
// byte it counts equal to the disk's.
TEST_F(DeviceMapper, ReadIntoErrorTargetReportsNoByteItDidNotRead) {
  phx::File f(env("PHX_DM_ERROR"), O_RDONLY, 0644, phx::DirectIo::required);
  for (const std::uint64_t start : {kBad - 4 * kMiB, kBad - 4 * kKiB, kBad - 512 * kKiB}) {
    const std::size_t size = kBad + 64 * kKiB - start;
    std::memset(reg_.host_view(), 0xee, reg_.size());
    try {
      (void)f.read(reg_, 0, size, start);
      ADD_FAILURE() << "read of [" << start << ", +" << size << ") over the error target succeeded";
    } catch (const phx::IoError &e) {
      EXPECT_EQ(e.code().value(), EIO) << e.what();
      EXPECT_LE(e.bytes_done(), kBad - start) << e.what();
      std::printf("error target: read of %zu bytes from %llu failed after %zu bytes\n", size,
                  static_cast<unsigned long long>(start), e.bytes_done());
      EXPECT_NE(std::string(e.what()).find(env("PHX_DM_ERROR")), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(start)), std::string::npos) << e.what();
      const auto want = error_dev_bytes(start, e.bytes_done());
      EXPECT_EQ(std::memcmp(reg_.host_view(), want.data(), want.size()), 0)
          << "bytes reported read differ from the disk";
    }
  }
  // Good ranges either side still read whole and right.
  for (const std::uint64_t start : {std::uint64_t{0}, kBad - kMiB, kBadEnd, kErrorSize - kMiB}) {
    ASSERT_EQ(f.read(reg_, 0, kMiB, start), kMiB) << "good range at " << start;
    const auto want = error_dev_bytes(start, kMiB);
    EXPECT_EQ(std::memcmp(reg_.host_view(), want.data(), kMiB), 0) << "good range at " << start;
  }
}

// Queued requests of 256 KiB over the whole device: exactly those touching
// the bad MiB fail, with no byte counted, and the rest arrive intact.
TEST_F(DeviceMapper, QueuedReadsFailExactlyTheRequestsThatTouchTheBadRange) {
  phx::File f(env("PHX_DM_ERROR"), O_RDONLY, 0644, phx::DirectIo::required);
  constexpr std::size_t kReq = 256 * kKiB;
  const std::uint64_t first = kBad - 4 * kMiB;  // 32 requests over [4, 12) MiB
  std::vector<phx::IoRequest> reqs;
  for (std::size_t i = 0; i < reg_.size() / kReq; ++i) {
    reqs.push_back(phx::IoRequest::read(f, reg_, i * kReq, kReq, first + i * kReq, i));
  }
  phx::IoQueue q(8);
  std::size_t failed = 0;
  for (const auto &c : q.run(reqs)) {
    const std::uint64_t at = first + c.user_data * kReq;
    const bool bad = at < kBadEnd && at + kReq > kBad;
    if (bad) {
      ++failed;
      EXPECT_EQ(c.error, EIO) << "request at " << at;
      EXPECT_LE(c.bytes, at < kBad ? kBad - at : 0) << "request at " << at;
    } else {
      ASSERT_EQ(c.error, 0) << "request at " << at;
      ASSERT_EQ(c.bytes, kReq);
      const auto want = error_dev_bytes(at, kReq);
      EXPECT_EQ(std::memcmp(reg_.host_view() + c.user_data * kReq, want.data(), kReq), 0)
          << "request at " << at;
    }
  }
  EXPECT_EQ(failed, (kBadEnd - kBad) / kReq);
}

// Writes from device memory: up to the bad MiB they succeed, into it they
// fail with bytes_done never past it.
TEST_F(DeviceMapper, WriteIntoErrorTargetReportsNoByteItDidNotWrite) {
  phx::File f(env("PHX_DM_DISCARD"), O_WRONLY, 0644, phx::DirectIo::required);
  EXPECT_EQ(f.write(reg_, 0, kMiB, kBad - kMiB), kMiB);
  EXPECT_EQ(f.write(reg_, 0, kMiB, kBadEnd), kMiB);
  const std::uint64_t start = kBad - 3 * kMiB;
  try {
    (void)f.write(reg_, 0, 4 * kMiB, start);
    ADD_FAILURE() << "write over the error target succeeded";
  } catch (const phx::IoError &e) {
    EXPECT_EQ(e.code().value(), EIO) << e.what();
    EXPECT_LE(e.bytes_done(), kBad - start) << e.what();
    EXPECT_NE(std::string(e.what()).find(env("PHX_DM_DISCARD")), std::string::npos) << e.what();
  }
}

// A flakey device going up and down under a stream of reads: every read
// either completes with the disk's bytes or fails with EIO, its counted
// prefix intact.  Both outcomes must occur.
TEST_F(DeviceMapper, FlakeyDeviceNeverYieldsWrongBytes) {
  phx::File f(env("PHX_DM_FLAKEY"), O_RDONLY, 0644, phx::DirectIo::required);
  std::mt19937_64 rng(9);
  std::size_t ok = 0;
  std::size_t failed = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until || ok == 0 || failed == 0) {
    if (std::chrono::steady_clock::now() > until + std::chrono::seconds(20)) {
      break;
    }
    const std::uint64_t at = rng() % 60 * 256 * kKiB;  // [0, 15) MiB
    const std::size_t size = (1 + rng() % 4) * 256 * kKiB;
    std::size_t counted = 0;
    try {
      counted = f.read(reg_, 0, size, at);
      ASSERT_EQ(counted, size);
      ++ok;
    } catch (const phx::IoError &e) {
      ASSERT_EQ(e.code().value(), EIO) << e.what();
      counted = e.bytes_done();
      ASSERT_LE(counted, size);
      ++failed;
    }
    const auto want = disk_behind(at, counted, 216 * kMiB);
    ASSERT_EQ(std::memcmp(reg_.host_view(), want.data(), counted), 0)
        << counted << " bytes counted at " << at << " differ from the disk";
  }
  EXPECT_GT(ok, 0U);
  EXPECT_GT(failed, 0U);
  std::printf("flakey: %zu reads whole, %zu failed with EIO\n", ok, failed);
}

}  // namespace
