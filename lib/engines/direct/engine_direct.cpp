// SPDX-License-Identifier: MIT
// The direct engine: registration pins device memory through phxfs.ko and
// maps it; I/O is the host-view transfer on that mapping, so the NVMe
// controller DMAs into device memory with no host buffer.
#include <cerrno>
#include <utility>

#include "core/error.hpp"
#include "core/log.hpp"
#include "engines/direct/driver.hpp"
#include "engines/engine_backend.hpp"

namespace phx::detail {
namespace {

class DirectMapping final : public Mapping {
 public:
  DirectMapping(std::uintptr_t address, std::size_t size, std::byte *view,
                std::shared_ptr<DeviceDriver> driver, DriverRegistration reg, std::byte *base,
                std::size_t mapped) noexcept
      : Mapping(address, size, view),
        driver_(std::move(driver)),
        reg_(reg),
        base_(base),
        mapped_(mapped) {}

  // Unmap before DEREGISTER: the module then finds no user mapping left to
  // revoke and only has to unpin.
  ~DirectMapping() override {
    if (const int err = driver_->unmap(base_, mapped_); err != 0) {
      log(LogLevel::error, driver_->name() + ": munmap failed: " + errno_text(err));
    }
    if (const int err = driver_->deregister(reg_.handle); err != 0) {
      log(LogLevel::error, driver_->name() + ": DEREGISTER of handle " +
                               std::to_string(reg_.handle) + " failed: " + errno_text(err));
    }
  }
  DirectMapping(const DirectMapping &) = delete;
  DirectMapping &operator=(const DirectMapping &) = delete;
  DirectMapping(DirectMapping &&) = delete;
  DirectMapping &operator=(DirectMapping &&) = delete;

 private:
  std::shared_ptr<DeviceDriver> driver_;
  DriverRegistration reg_;
  std::byte *base_;
  std::size_t mapped_;
};

class DirectBackend final : public EngineBackend {
 public:
  explicit DirectBackend(std::shared_ptr<DeviceDriver> driver)
      : driver_(std::move(driver)), page_size_(driver_->info().page_size) {
    if (page_size_ == 0 || (page_size_ & (page_size_ - 1)) != 0) {
      throw_errno(EPROTO,
                  driver_->name() + ": module reports page size " + std::to_string(page_size_));
    }
  }

  [[nodiscard]] Engine kind() const noexcept override { return Engine::direct; }

  [[nodiscard]] std::shared_ptr<Mapping> map(std::uintptr_t address, std::size_t size) override {
    // Widen to the module's granularity (64 KiB GPU pages); CUDA allocates
    // in 2 MiB units, so the widened range stays inside the allocation.
    const std::uintptr_t first = address / page_size_ * page_size_;
    const std::uintptr_t end = address + size;
    const std::uintptr_t last = (end + page_size_ - 1) / page_size_ * page_size_;
    if (last < end) {
      throw_errno(EINVAL, "device range " + std::to_string(address) + " + " + std::to_string(size) +
                              " overflows");
    }
    const std::size_t mapped = last - first;
    const DriverRegistration reg = driver_->register_range(first, mapped);
    std::byte *base = nullptr;
    try {
      base = driver_->map(reg, mapped);
    } catch (...) {
      (void)driver_->deregister(reg.handle);
      throw;
    }
    return std::make_shared<DirectMapping>(address, size, base + (address - first), driver_, reg,
                                           base, mapped);
  }

 private:
  std::shared_ptr<DeviceDriver> driver_;
  std::size_t page_size_;
};

}  // namespace

std::unique_ptr<EngineBackend> make_direct_backend(int device_id, const Options & /*options*/) {
  return std::make_unique<DirectBackend>(open_driver(device_id));
}

}  // namespace phx::detail
