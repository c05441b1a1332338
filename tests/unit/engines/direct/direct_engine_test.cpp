// SPDX-License-Identifier: MIT
// The direct engine's logic against a fake module (fake_driver.hpp): the
// REGISTER -> mmap -> I/O -> munmap -> DEREGISTER sequence, widening of
// unaligned ranges, cleanup on every failure, and the C API on top of it.
// The real module runs the same library code in the VM rig.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/device_state.hpp"
#include "fake_driver.hpp"
#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"
#include "test_support.hpp"

namespace phx {
namespace {

using test::FakeDriver;
using test::find_mismatch;
using test::TempDir;

constexpr std::size_t kBar = 64 << 20;
constexpr std::uint32_t kPage = 64 << 10;

void *dev_addr(std::uint64_t bar_offset) {
  return reinterpret_cast<void *>(FakeDriver::kBase + bar_offset);
}

class DirectEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = std::make_shared<FakeDriver>(kBar, kPage);
    detail::set_driver_factory([d = driver_](int) { return d; });
  }
  void TearDown() override { detail::set_driver_factory({}); }
  std::shared_ptr<FakeDriver> driver_;
  TempDir dir_;
};

TEST_F(DirectEngine, AutoPicksDirectWhenTheDriverIsThere) {
  auto dev = Device::open(0);
  EXPECT_EQ(dev.engine(), Engine::direct);
}

TEST_F(DirectEngine, ReadLandsInDeviceMemory) {
  test::write_pattern_file(dir_ / "f", 4 << 20, 31);
  auto dev = Device::open(0, Engine::direct);
  auto reg = dev.register_memory(dev_addr(1 << 20), 4 << 20);
  EXPECT_NE(static_cast<void *>(reg.host_view()), reg.device_address());
  EXPECT_EQ(driver_->live(), 1U);
  File f(dir_ / "f", O_RDONLY);
  ASSERT_TRUE(f.direct_io());
  EXPECT_EQ(f.read(reg, 0, 4 << 20, 0), 4U << 20);
  // Seen from the device side, not through the library's view.
  EXPECT_EQ(find_mismatch({driver_->device_side(FakeDriver::kBase + (1 << 20)), 4 << 20}, 31, 0),
            std::nullopt);
}

TEST_F(DirectEngine, WriteTakesBytesFromDeviceMemory) {
  auto dev = Device::open(0, Engine::direct);
  auto reg = dev.register_memory(dev_addr(0), 1 << 20);
  test::fill_pattern({driver_->device_side(FakeDriver::kBase), 1 << 20}, 8, 0);
  File f(dir_ / "out", O_RDWR | O_CREAT);
  EXPECT_EQ(f.write(reg, 0, 1 << 20, 0), 1U << 20);
  EXPECT_EQ(find_mismatch(test::read_whole_file(dir_ / "out"), 8, 0), std::nullopt);
}

TEST_F(DirectEngine, UnalignedRangeIsWidenedUnderneath) {
  test::write_pattern_file(dir_ / "f", 1 << 20, 3);
  auto dev = Device::open(0, Engine::direct);
  const std::uint64_t off = kPage + 100;
  auto reg = dev.register_memory(dev_addr(off), 5000);
  EXPECT_EQ(reg.size(), 5000U);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(reg.host_view()) % 4096,
            100U);  // mmap is 4 KiB aligned
  File f(dir_ / "f", O_RDONLY);
  EXPECT_EQ(f.read(reg, 0, 5000, 4096), 5000U);
  EXPECT_EQ(find_mismatch({driver_->device_side(FakeDriver::kBase + off), 5000}, 3, 4096),
            std::nullopt);
  // The byte before the registered range was not written.
  EXPECT_EQ(*driver_->device_side(FakeDriver::kBase + off - 1), std::byte{0});
}

TEST_F(DirectEngine, ReleaseUnmapsBeforeDeregistering) {
  auto dev = Device::open(0, Engine::direct);
  {
    auto reg = dev.register_memory(dev_addr(0), kPage);
    EXPECT_EQ(dev.registration_count(), 1U);
  }
  EXPECT_EQ(driver_->events, "UD");
  EXPECT_EQ(driver_->live(), 0U);
  EXPECT_EQ(driver_->maps_live, 0);
  EXPECT_EQ(dev.registration_count(), 0U);
}

TEST_F(DirectEngine, RegisterFailureLeavesNothingBehind) {
  auto dev = Device::open(0, Engine::direct);
  driver_->fail_register = ENOMEM;
  EXPECT_THROW((void)dev.register_memory(dev_addr(0), kPage), std::system_error);
  EXPECT_EQ(dev.registration_count(), 0U);
  driver_->fail_register = 0;
  auto reg = dev.register_memory(dev_addr(0), kPage);  // the range is free again
  EXPECT_TRUE(reg);
}

TEST_F(DirectEngine, MapFailureDeregisters) {
  auto dev = Device::open(0, Engine::direct);
  driver_->fail_map = ENOMEM;
  try {
    (void)dev.register_memory(dev_addr(0), kPage);
    FAIL() << "expected ENOMEM";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), ENOMEM);
  }
  EXPECT_EQ(driver_->live(), 0U);
  EXPECT_EQ(driver_->events, "D");
  EXPECT_EQ(dev.registration_count(), 0U);
}

TEST_F(DirectEngine, RangeOutsideTheBarIsRefused) {
  auto dev = Device::open(0, Engine::direct);
  EXPECT_THROW((void)dev.register_memory(dev_addr(kBar - kPage), 2 * kPage), std::system_error);
  EXPECT_THROW((void)dev.register_memory(reinterpret_cast<void *>(0x1000), kPage),
               std::system_error);
  EXPECT_EQ(driver_->live(), 0U);
}

TEST_F(DirectEngine, BadPageSizeFromTheModuleIsEproto) {
  auto odd = std::make_shared<FakeDriver>(kBar, 3000);
  detail::set_driver_factory([odd](int) { return odd; });
  try {
    (void)Device::open(0, Engine::direct);
    FAIL() << "expected EPROTO";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EPROTO);
  }
}

TEST_F(DirectEngine, IoQueueReadsIntoDeviceMemory) {
  test::write_pattern_file(dir_ / "f", 2 << 20, 14);
  auto dev = Device::open(0, Engine::direct);
  auto reg = dev.register_memory(dev_addr(0), 2 << 20);
  File f(dir_ / "f", O_RDONLY);
  std::vector<IoRequest> reqs;
  for (std::uint64_t i = 0; i < 32; ++i) {
    reqs.push_back(IoRequest::read(f, reg, i * 65536, 65536, (31 - i) * 65536, i));
  }
  IoQueue q(8);
  for (const auto &c : q.run(reqs)) {
    ASSERT_EQ(c.error, 0);
  }
  for (std::uint64_t i = 0; i < 32; ++i) {
    ASSERT_EQ(find_mismatch({driver_->device_side(FakeDriver::kBase + i * 65536), 65536}, 14,
                            (31 - i) * 65536),
              std::nullopt);
  }
}

TEST_F(DirectEngine, CApiOnTheDirectEngine) {
  test::write_pattern_file(dir_ / "f", 1 << 20, 17);
  ASSERT_EQ(phxfs_open_engine(1, PHXFS_ENGINE_DIRECT), 0) << phxfs_last_error();
  void *gpu = dev_addr(4 * kPage);
  void *target = nullptr;
  ASSERT_EQ(phxfs_regmem(1, gpu, 1 << 20, &target), 0) << phxfs_last_error();
  EXPECT_NE(target, gpu);
  const int fd = ::open((dir_ / "f").c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  // The paper's way: pread straight into the returned address...
  ASSERT_EQ(::pread(fd, target, 65536, 0), 65536);
  EXPECT_EQ(find_mismatch({driver_->device_side(FakeDriver::kBase + 4 * kPage), 65536}, 17, 0),
            std::nullopt);
  // ...and phxfs_read with the device address.
  EXPECT_EQ(phxfs_read(phxfs_fileid_t{fd, 1}, gpu, 65536, (1 << 20) - 65536, 65536),
            (1 << 20) - 65536);
  EXPECT_EQ(find_mismatch({driver_->device_side(FakeDriver::kBase + 4 * kPage), 1 << 20}, 17, 0),
            std::nullopt);
  ::close(fd);
  EXPECT_EQ(driver_->live(), 1U);
  // Closing the device deregisters what the caller left registered.
  EXPECT_EQ(phxfs_close(1), 0);
  EXPECT_EQ(driver_->live(), 0U);
  EXPECT_EQ(driver_->maps_live, 0);
}

TEST_F(DirectEngine, DeregisteredRangeStaysMappedWhileInUse) {
  Options options;
  options.engine = Engine::direct;
  auto state = detail::DeviceState::open(0, options);
  auto mapping = state->register_range(dev_addr(0), kPage);
  auto in_flight = state->table().find(FakeDriver::kBase, kPage);
  mapping.reset();
  state->deregister_range(dev_addr(0), kPage);
  EXPECT_EQ(driver_->live(), 1U);  // an I/O still holds it
  in_flight->host_view()[0] = std::byte{1};
  in_flight.reset();
  EXPECT_EQ(driver_->live(), 0U);
  EXPECT_EQ(driver_->events, "UD");
}

}  // namespace
}  // namespace phx
