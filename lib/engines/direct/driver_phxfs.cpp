// SPDX-License-Identifier: MIT
// DeviceDriver over /dev/phxfs_devN: the uapi ioctls and mmap.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <system_error>
#include <utility>

#include "core/error.hpp"
#include "core/tsan_kernel_memory.hpp"
#include "engines/direct/driver.hpp"
#include "phxfs_ioctl.h"

namespace phx::detail {
namespace {

std::string provider_name(std::uint32_t provider) {
  switch (provider) {
    case PHXFS_PROVIDER_NVIDIA:
      return "nvidia";
    case PHXFS_PROVIDER_PCIBAR:
      return "pcibar";
    case PHXFS_PROVIDER_DMABUF:
      return "dmabuf";
    default:
      return "none";
  }
}

int xioctl(int fd, unsigned long request, void *arg) {
  int r = 0;
  do {
    r = ::ioctl(fd, request, arg);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  } while (r < 0 && errno == EINTR);
  return r;
}

class PhxfsDriver final : public DeviceDriver {
 public:
  PhxfsDriver(int fd, std::string path) noexcept : fd_(fd), path_(std::move(path)) {}
  ~PhxfsDriver() override { ::close(fd_); }
  PhxfsDriver(const PhxfsDriver &) = delete;
  PhxfsDriver &operator=(const PhxfsDriver &) = delete;
  PhxfsDriver(PhxfsDriver &&) = delete;
  PhxfsDriver &operator=(PhxfsDriver &&) = delete;

  [[nodiscard]] const std::string &name() const noexcept override { return path_; }

  [[nodiscard]] ModuleDeviceInfo info() override {
    phxfs_info raw = {};
    raw.abi_version = PHXFS_ABI_VERSION;
    raw.argsz = sizeof(raw);
    if (xioctl(fd_, PHXFS_IOC_GET_INFO, &raw) != 0) {
      const int err = errno;
      throw_errno(err, path_ + ": PHXFS_IOC_GET_INFO failed");
    }
    ModuleDeviceInfo info;
    info.abi_version = raw.abi_version;
    info.device_index = raw.device_index;
    info.provider = raw.provider;
    info.provider_name = provider_name(raw.provider);
    info.pci_domain = raw.pci_domain;
    info.pci_bdf = raw.pci_bdf;
    info.page_size = raw.page_size;
    info.flags = raw.flags;
    info.bar_size = raw.bar_size;
    info.regs_live = raw.regs_live;
    info.regs_total = raw.regs_total;
    info.pages_mapped = raw.pages_mapped;
    info.revocations = raw.revocations;
    info.errors = raw.errors;
    return info;
  }

  [[nodiscard]] DriverRegistration register_range(std::uint64_t device_address,
                                                  std::uint64_t size) override {
    phxfs_register raw = {};
    raw.abi_version = PHXFS_ABI_VERSION;
    raw.argsz = sizeof(raw);
    raw.device_addr = device_address;
    raw.length = size;
    if (xioctl(fd_, PHXFS_IOC_REGISTER, &raw) != 0) {
      const int err = errno;
      throw_errno(err, path_ + ": PHXFS_IOC_REGISTER of device address " +
                           std::to_string(device_address) + ", size " + std::to_string(size) +
                           " failed" +
                           (err == EDQUOT ? " (this user holds phxfs's max_regs_per_user "
                                            "registrations, max_pinned_mib_per_user MiB or "
                                            "max_bar_percent_per_user of the device's BAR)"
                                          : ""));
    }
    return {raw.handle, raw.mmap_offset};
  }

  [[nodiscard]] std::byte *map(const DriverRegistration &reg, std::size_t size) override {
    void *p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                     static_cast<off_t>(reg.mmap_offset));
    if (p == MAP_FAILED) {
      const int err = errno;
      throw_errno(err, path_ + ": mmap of registration " + std::to_string(reg.handle) + ", size " +
                           std::to_string(size) + " failed");
    }
    return static_cast<std::byte *>(p);
  }

  int unmap(std::byte *address, std::size_t size) noexcept override {
    return munmap_ordered(address, size) == 0 ? 0 : errno;
  }

  int deregister(std::uint64_t handle) noexcept override {
    phxfs_deregister raw = {};
    raw.abi_version = PHXFS_ABI_VERSION;
    raw.argsz = sizeof(raw);
    raw.handle = handle;
    return xioctl(fd_, PHXFS_IOC_DEREGISTER, &raw) == 0 ? 0 : errno;
  }

 private:
  int fd_;
  std::string path_;
};

std::mutex factory_mutex;
DriverFactory &factory() {
  static DriverFactory instance;
  return instance;
}

// Whether this library can talk to a module that reports `module_abi` in
// GET_INFO: it sends PHXFS_ABI_VERSION, which every module from that
// version on accepts.
[[nodiscard]] constexpr bool module_abi_compatible(std::uint32_t module_abi) noexcept {
  return module_abi >= PHXFS_ABI_VERSION;
}
static_assert(module_abi_compatible(PHXFS_ABI_VERSION) &&
              module_abi_compatible(PHXFS_ABI_VERSION + 1) &&
              !module_abi_compatible(PHXFS_ABI_VERSION - 1));

}  // namespace

std::string device_node_path(int device_id) {
  return PHXFS_DEVICE_PREFIX + std::to_string(device_id);
}

std::shared_ptr<DeviceDriver> open_phxfs_driver(int device_id) {
  const std::string path = device_node_path(device_id);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      throw_errno(ENODEV, path + ": no such device node (is the phxfs module loaded?)");
    }
    throw_errno(err, "open " + path);
  }
  auto driver = std::make_shared<PhxfsDriver>(fd, path);
  const ModuleDeviceInfo info = driver->info();
  // GET_INFO reports the module's own version.  A newer module keeps
  // serving callers of older versions (uapi header), so only an older one
  // is refused.  Modules before the ABI range answered ours exactly.
  if (!module_abi_compatible(info.abi_version)) {
    throw_errno(EPROTO, path + ": module speaks phxfs ABI " + std::to_string(info.abi_version) +
                            ", this library needs " + std::to_string(PHXFS_ABI_VERSION) +
                            " or newer");
  }
  return driver;
}

void set_driver_factory(DriverFactory f) {
  const std::lock_guard lock(factory_mutex);
  factory() = std::move(f);
}

std::shared_ptr<DeviceDriver> open_driver(int device_id) {
  DriverFactory f;
  {
    const std::lock_guard lock(factory_mutex);
    f = factory();
  }
  return f ? f(device_id) : open_phxfs_driver(device_id);
}

bool direct_available(int device_id, std::string &reason) {
  {
    const std::lock_guard lock(factory_mutex);
    if (factory()) {
      reason = "test driver installed";
      return true;
    }
  }
  const std::string path = device_node_path(device_id);
  if (::access(path.c_str(), F_OK) != 0) {
    reason = path + " absent (phxfs module not loaded or device not served)";
    return false;
  }
  // The node can exist while its provider cannot pin yet (phxfs loaded
  // before the NVIDIA driver): registrations would fail with ENODEV.
  try {
    const ModuleDeviceInfo info = open_phxfs_driver(device_id)->info();
    if ((info.flags & PHXFS_INFO_PROVIDER_MISSING) != 0U) {
      reason = path + " present, but its " + info.provider_name +
               " provider's driver is not loaded (registrations would fail with ENODEV)";
      return false;
    }
    if ((info.flags & PHXFS_INFO_PIN_REFUSED) != 0U) {
      reason = path + " present, but its " + info.provider_name +
               " driver gives no persistent pin here (MIG or vGPU; registrations would fail "
               "with EOPNOTSUPP unless phxfs is loaded with nv_api=legacy)";
      return false;
    }
  } catch (const std::system_error &e) {
    reason = path + " present but unusable: " + e.what();
    return false;
  }
  reason = path + " present (phxfs module loaded)";
  return true;
}

}  // namespace phx::detail

namespace phx {

ModuleDeviceInfo query_module_device(int device_id) {
  if (device_id < 0 || static_cast<unsigned>(device_id) >= PHXFS_MAX_DEVICES) {
    detail::throw_errno(EINVAL, "device id " + std::to_string(device_id) + " out of range [0, " +
                                    std::to_string(PHXFS_MAX_DEVICES) + ")");
  }
  return detail::open_phxfs_driver(device_id)->info();
}

}  // namespace phx
