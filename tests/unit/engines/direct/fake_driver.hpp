// SPDX-License-Identifier: MIT
// A DeviceDriver that behaves like phxfs.ko's pcibar provider over a memfd:
// the memfd is the "BAR", device addresses are kBase + BAR offset, mmap of a
// registration maps the memfd at its BAR offset.  Tests read what "the NVMe
// DMA'd into device memory" through a second, independent mapping of the
// memfd, and can make any call fail.
#ifndef PHOENIX_TESTS_FAKE_DRIVER_HPP
#define PHOENIX_TESTS_FAKE_DRIVER_HPP

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <system_error>

#include "core/tsan_kernel_memory.hpp"
#include "engines/direct/driver.hpp"

namespace phx::test {

class FakeDriver final : public detail::DeviceDriver {
 public:
  static constexpr std::uint64_t kBase = 0x7f0000000000ULL;

  FakeDriver(std::size_t bar_size, std::uint32_t page_size)
      : bar_size_(bar_size), page_size_(page_size), fd_(::memfd_create("fake-bar", MFD_CLOEXEC)) {
    if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(bar_size)) != 0) {
      throw std::system_error(errno, std::system_category(), "memfd");
    }
    void *p = ::mmap(nullptr, bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
      throw std::system_error(errno, std::system_category(), "mmap memfd");
    }
    device_side_ = static_cast<std::byte *>(p);
  }
  ~FakeDriver() override {
    (void)detail::munmap_ordered(device_side_, bar_size_);
    ::close(fd_);
  }
  FakeDriver(const FakeDriver &) = delete;
  FakeDriver &operator=(const FakeDriver &) = delete;
  FakeDriver(FakeDriver &&) = delete;
  FakeDriver &operator=(FakeDriver &&) = delete;

  [[nodiscard]] const std::string &name() const noexcept override { return name_; }

  [[nodiscard]] ModuleDeviceInfo info() override {
    ModuleDeviceInfo i;
    i.abi_version = 1;
    i.provider = 2;
    i.provider_name = "pcibar";
    i.page_size = page_size_;
    i.bar_size = bar_size_;
    const std::lock_guard lock(mutex_);
    i.regs_live = live_.size();
    return i;
  }

  [[nodiscard]] detail::DriverRegistration register_range(std::uint64_t address,
                                                          std::uint64_t size) override {
    const std::lock_guard lock(mutex_);
    ++register_calls;
    if (fail_register != 0) {
      throw std::system_error(fail_register, std::system_category(), "fake REGISTER");
    }
    // What the module must check: alignment, bounds, overflow, zero length.
    if (size == 0 || address % page_size_ != 0 || size % page_size_ != 0 || address < kBase ||
        address - kBase > bar_size_ || size > bar_size_ - (address - kBase)) {
      throw std::system_error(EINVAL, std::system_category(), "fake REGISTER: bad range");
    }
    const std::uint64_t handle = ++next_handle_;
    live_[handle] = {address - kBase, size};
    return {handle, address - kBase};
  }

  [[nodiscard]] std::byte *map(const detail::DriverRegistration &reg, std::size_t size) override {
    const std::lock_guard lock(mutex_);
    if (fail_map != 0) {
      throw std::system_error(fail_map, std::system_category(), "fake mmap");
    }
    void *p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                     static_cast<off_t>(reg.mmap_offset));
    if (p == MAP_FAILED) {
      throw std::system_error(errno, std::system_category(), "fake mmap");
    }
    ++maps_live;
    return static_cast<std::byte *>(p);
  }

  int unmap(std::byte *address, std::size_t size) noexcept override {
    const std::lock_guard lock(mutex_);
    --maps_live;
    events += "U";
    return detail::munmap_ordered(address, size) == 0 ? 0 : errno;
  }

  int deregister(std::uint64_t handle) noexcept override {
    const std::lock_guard lock(mutex_);
    events += "D";
    return live_.erase(handle) == 1 ? 0 : EINVAL;
  }

  /// Device memory as the device sees it.
  [[nodiscard]] std::byte *device_side(std::uint64_t device_address) const {
    return device_side_ + (device_address - kBase);
  }
  [[nodiscard]] std::size_t live() {
    const std::lock_guard lock(mutex_);
    return live_.size();
  }

  int fail_register = 0;
  int fail_map = 0;
  int register_calls = 0;
  int maps_live = 0;
  std::string events;

 private:
  std::size_t bar_size_;
  std::uint32_t page_size_;
  int fd_;
  std::byte *device_side_ = nullptr;
  std::string name_ = "fake-bar";
  std::mutex mutex_;
  std::uint64_t next_handle_ = 0;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> live_;
};

}  // namespace phx::test

#endif  // PHOENIX_TESTS_FAKE_DRIVER_HPP
