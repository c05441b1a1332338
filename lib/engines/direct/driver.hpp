// SPDX-License-Identifier: MIT
// The seam between the direct engine and phxfs.ko.  The real driver issues
// the uapi ioctls and mmap on /dev/phxfs_devN; unit tests install a fake
// that serves a memfd as the "BAR", so the engine's logic runs without the
// kernel module (the module itself is tested in the VM rig).
#ifndef PHOENIX_LIB_DRIVER_HPP
#define PHOENIX_LIB_DRIVER_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "phoenix/phoenix.hpp"

namespace phx::detail {

struct DriverRegistration {
  std::uint64_t handle = 0;
  std::uint64_t mmap_offset = 0;
};

class DeviceDriver {
 public:
  DeviceDriver() = default;
  virtual ~DeviceDriver() = default;
  DeviceDriver(const DeviceDriver &) = delete;
  DeviceDriver &operator=(const DeviceDriver &) = delete;
  DeviceDriver(DeviceDriver &&) = delete;
  DeviceDriver &operator=(DeviceDriver &&) = delete;

  /// The device node or fake's name, for messages.
  [[nodiscard]] virtual const std::string &name() const noexcept = 0;
  /// GET_INFO.  Throws std::system_error.
  [[nodiscard]] virtual ModuleDeviceInfo info() = 0;
  /// REGISTER of a range aligned to info().page_size.  Throws.
  [[nodiscard]] virtual DriverRegistration register_range(std::uint64_t device_address,
                                                          std::uint64_t size) = 0;
  /// mmap of a registration.  Throws.
  [[nodiscard]] virtual std::byte *map(const DriverRegistration &reg, std::size_t size) = 0;
  /// munmap; returns 0 or an errno.
  virtual int unmap(std::byte *address, std::size_t size) noexcept = 0;
  /// DEREGISTER; returns 0 or an errno.
  virtual int deregister(std::uint64_t handle) noexcept = 0;
};

/// Opens /dev/phxfs_dev<device_id> and checks the ABI version.  Throws
/// std::system_error (ENODEV when the node is absent, EPROTO on mismatch).
[[nodiscard]] std::shared_ptr<DeviceDriver> open_phxfs_driver(int device_id);

using DriverFactory = std::function<std::shared_ptr<DeviceDriver>(int device_id)>;
/// Replaces open_phxfs_driver for the direct engine (tests); empty restores it.
void set_driver_factory(DriverFactory factory);
/// The driver the direct engine uses for @p device_id.
[[nodiscard]] std::shared_ptr<DeviceDriver> open_driver(int device_id);
/// Whether the direct engine could serve @p device_id (node present or a
/// test factory installed).
[[nodiscard]] bool direct_available(int device_id, std::string &reason);

/// "/dev/phxfs_dev<id>"
[[nodiscard]] std::string device_node_path(int device_id);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_DRIVER_HPP
