// SPDX-License-Identifier: MIT
#include "cufile_shim/shim_state.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cufile_shim/bar_range.hpp"
#include "cufile_shim/cuda_probe.hpp"
#include "cufile_shim/errors.hpp"
#include "cufile_shim/settings.hpp"
#include "phxfs_ioctl.h"

namespace phx::cufile_shim {
namespace {

std::string hex(std::uintptr_t v) {
  char text[32];
  const int n = std::snprintf(text, sizeof(text), "%#zx", static_cast<std::size_t>(v));
  return {text, n > 0 ? static_cast<std::size_t>(n) : 0};
}

phx::File open_borrowed(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  struct stat st {};
  if (fd < 0 || flags < 0 || ::fstat(fd, &st) != 0) {
    throw ShimError(CU_FILE_INVALID_VALUE, "descriptor " + std::to_string(fd) + " is not open");
  }
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    throw ShimError(CU_FILE_INVALID_FILE_TYPE,
                    "descriptor " + std::to_string(fd) + " is neither a file nor a block device");
  }
  // Same access as the caller's descriptor.  A buffered one stays
  // buffered; an O_DIRECT one (what cuFile asks its callers for) gets the
  // library's cache policy, each read through the page cache when it holds
  // the range and O_DIRECT otherwise, as kvikio's compat mode and NVIDIA's
  // fall-back read a cached file (through the shim kvikio read a warm file
  // at 1.6 GB/s from the disk against 6-9 GB/s buffered).  The direct
  // engine's memory is always read O_DIRECT.
  const auto direct = (flags & O_DIRECT) != 0 ? phx::DirectIo::automatic : phx::DirectIo::off;
  return {"/proc/self/fd/" + std::to_string(fd), flags & O_ACCMODE, 0, direct};
}

bool overlaps(std::uintptr_t a, std::size_t a_size, std::uintptr_t b, std::size_t b_size) {
  return a < b + b_size && b < a + a_size;
}

}  // namespace

Handle::Handle(int fd) : fd_(fd), file_(open_borrowed(fd)) {}

Shim &Shim::get() {
  static Shim *instance = new Shim();  // NOLINT(cppcoreguidelines-owning-memory): never destroyed
  return *instance;
}

void Shim::open() {
  const std::lock_guard lock(driver_mutex_);
  ++opens_;
  active_.store(true, std::memory_order_release);
}

void Shim::ensure_open() {
  if (active_.load(std::memory_order_acquire)) {
    return;
  }
  const std::lock_guard lock(driver_mutex_);
  if (opens_ == 0) {
    implicit_ = true;
  }
  active_.store(true, std::memory_order_release);
}

CUfileOpError Shim::close() {
  std::map<int, OpenDevice> devices;
  std::map<std::uintptr_t, CachedAllocation> cache;
  {
    const std::lock_guard lock(driver_mutex_);
    if (opens_ == 0) {
      return CU_FILE_DRIVER_NOT_INITIALIZED;
    }
    if (--opens_ > 0) {
      return CU_FILE_SUCCESS;
    }
    implicit_ = false;
    active_.store(false, std::memory_order_release);
    devices.swap(devices_);
  }
  {
    // The cache's registrations and the devices (with the compat engine's
    // staging memory) go; registered buffers and handles keep what they use.
    const std::unique_lock lock(buffers_mutex_);
    cache.swap(cache_);
  }
  return CU_FILE_SUCCESS;  // released here, outside the locks
}

void Shim::reset() {
  std::map<int, OpenDevice> devices;
  std::map<std::uintptr_t, Buffer> buffers;
  std::map<std::uintptr_t, CachedAllocation> cache;
  {
    const std::lock_guard lock(driver_mutex_);
    opens_ = 0;
    implicit_ = false;
    active_.store(false, std::memory_order_release);
    devices.swap(devices_);
  }
  {
    const std::unique_lock lock(buffers_mutex_);
    buffers.swap(buffers_);
    cache.swap(cache_);
  }
}  // released here, outside the locks

long Shim::use_count() const {
  const std::lock_guard lock(driver_mutex_);
  return opens_ + (implicit_ && opens_ == 0 ? 1 : 0);
}

Shim::OpenDevice Shim::device(int device_id) {
  const std::lock_guard lock(driver_mutex_);
  if (auto it = devices_.find(device_id); it != devices_.end()) {
    return it->second;
  }
  // libphoenix's own choice (PHX_ENGINE, then direct where phxfs serves
  // the device, compat on a CUDA GPU, host otherwise), except the cuFile
  // engine: it would dlopen libcufile.so.0, which is this library.
  if (phx::choose_engine(device_id).engine == phx::Engine::cufile) {
    throw ShimError(CU_FILE_PLATFORM_NOT_SUPPORTED,
                    "PHX_ENGINE=cufile asks for NVIDIA's libcufile, whose place this library "
                    "takes; unset it or name direct, compat or host");
  }
  OpenDevice d{std::make_shared<phx::Device>(phx::Device::open(device_id)), 0};
  if (d.dev->engine() == phx::Engine::direct) {
    const phx::ModuleDeviceInfo info = phx::query_module_device(device_id);
    if (info.provider == PHXFS_PROVIDER_PCIBAR) {
      d.pcibar_size = info.bar_size;
    }
  }
  devices_.emplace(device_id, d);
  return d;
}

void Shim::check_unknown_memory(int device_id, std::uintptr_t start, std::size_t size) {
  const std::uint64_t bar_size = device(device_id).pcibar_size;
  if (bar_size == 0) {
    return;
  }
  const std::string what = "buffer " + hex(start) + " + " + std::to_string(size);
  const std::string bar = "the " + std::to_string(bar_size) +
                          "-byte PCI BAR phxfs serves as device " + std::to_string(device_id);
  switch (classify_bar_range(bar_size, start, size, mapped_in_process(start, size))) {
    case BarRange::inside:
      return;
    case BarRange::past_end:
      throw ShimError(CU_FILE_CUDA_POINTER_RANGE_ERROR, what + " runs past the end of " + bar);
    case BarRange::outside:
      throw ShimError(CU_FILE_CUDA_POINTER_INVALID,
                      what + " is neither CUDA memory nor an offset into " + bar);
    case BarRange::host_memory:
      throw ShimError(CU_FILE_CUDA_POINTER_INVALID,
                      what + " is mapped in this process: host memory, not an offset into " + bar);
  }
}

std::shared_ptr<const phx::Registration> Shim::register_range(int device_id, std::uintptr_t start,
                                                              std::size_t size) {
  auto dev = device(device_id).dev;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the caller's device address
  auto *address = reinterpret_cast<void *>(start);
  return std::make_shared<const phx::Registration>(dev->register_memory(address, size));
}

void *Shim::add_handle(int fd) {
  auto h = std::make_shared<Handle>(fd);
  void *key = h.get();
  const std::unique_lock lock(handles_mutex_);
  handles_.emplace(key, std::move(h));
  return key;
}

bool Shim::remove_handle(void *key) {
  std::shared_ptr<Handle> gone;  // closed outside the lock (I/O in flight keeps it)
  const std::unique_lock lock(handles_mutex_);
  if (auto it = handles_.find(key); it != handles_.end()) {
    gone = std::move(it->second);
    handles_.erase(it);
    return true;
  }
  return false;
}

std::shared_ptr<Handle> Shim::handle(void *key) const {
  if (key == nullptr) {
    throw ShimError(CU_FILE_INVALID_VALUE, "null file handle");
  }
  const std::shared_lock lock(handles_mutex_);
  auto it = handles_.find(key);
  if (it == handles_.end()) {
    throw ShimError(
        CU_FILE_HANDLE_NOT_REGISTERED,
        "file handle " + hex(reinterpret_cast<std::uintptr_t>(key)) + " is not registered");
  }
  return it->second;
}

void Shim::register_buffer(const void *address, std::size_t size) {
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  if (address == nullptr || size == 0 || start + size < start) {
    throw ShimError(CU_FILE_INVALID_VALUE,
                    "buffer " + hex(start) + " of " + std::to_string(size) + " bytes");
  }
  const PointerInfo info = probe_pointer(address);
  if (info.known && !info.device_memory) {
    throw ShimError(CU_FILE_CUDA_MEMORY_TYPE_INVALID,
                    "buffer " + hex(start) + " is not device memory (host or managed)");
  }
  if (info.known && start + size > info.start + info.size) {
    throw ShimError(
        CU_FILE_CUDA_POINTER_RANGE_ERROR,
        "buffer " + hex(start) + " + " + std::to_string(size) + " runs past its CUDA allocation");
  }
  std::vector<std::shared_ptr<const phx::Registration>> evicted;
  {
    const std::unique_lock lock(buffers_mutex_);
    if (buffers_.contains(start)) {
      throw ShimError(CU_FILE_MEMORY_ALREADY_REGISTERED, "buffer " + hex(start));
    }
    // The cache's registration of the whole allocation would overlap.
    for (auto it = cache_.begin(); it != cache_.end();) {
      if (overlaps(it->first, it->second.size, start, size)) {
        evicted.push_back(std::move(it->second.reg));
        it = cache_.erase(it);
      } else {
        ++it;
      }
    }
  }
  evicted.clear();  // deregistered before ours is made
  const int device_id = info.device_id >= 0 ? info.device_id : settings().default_device;
  std::shared_ptr<const phx::Registration> reg;
  try {
    if (!info.known) {
      check_unknown_memory(device_id, start, size);
    }
    reg = register_range(device_id, start, size);
  } catch (const std::system_error &e) {
    const int err = e.code().value();
    throw ShimError(err == EEXIST   ? CU_FILE_MEMORY_ALREADY_REGISTERED
                    : err == EINVAL ? CU_FILE_INVALID_VALUE
                                    : op_error_from_errno(err),
                    e.what());
  }
  const std::unique_lock lock(buffers_mutex_);
  buffers_[start] = Buffer{size, std::move(reg)};
}

void Shim::deregister_buffer(const void *address) {
  std::shared_ptr<const phx::Registration> gone;  // deregistered outside the lock
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  const std::unique_lock lock(buffers_mutex_);
  auto it = buffers_.find(start);
  if (address == nullptr || it == buffers_.end()) {
    throw ShimError(CU_FILE_MEMORY_NOT_REGISTERED, "buffer " + hex(start));
  }
  gone = std::move(it->second.reg);
  buffers_.erase(it);
}

Target Shim::resolve(const void *address, std::size_t size) {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (address == nullptr || a + size < a) {
    throw ShimError(CU_FILE_INVALID_VALUE, "buffer " + hex(a) + " + " + std::to_string(size));
  }
  {
    const std::shared_lock lock(buffers_mutex_);
    auto it = buffers_.upper_bound(a);
    if (it != buffers_.begin()) {
      --it;
      if (a - it->first <= it->second.size && size <= it->second.size - (a - it->first)) {
        return Target{it->second.reg, a - it->first, {}};
      }
    }
  }
  const PointerInfo info = probe_pointer(address);
  if (info.known) {
    if (!info.device_memory) {
      throw ShimError(CU_FILE_CUDA_MEMORY_TYPE_INVALID,
                      "buffer " + hex(a) + " is not device memory (host or managed)");
    }
    if (a + size > info.start + info.size) {
      throw ShimError(
          CU_FILE_CUDA_POINTER_RANGE_ERROR,
          "buffer " + hex(a) + " + " + std::to_string(size) + " runs past its CUDA allocation");
    }
    if (info.device_id >= 0) {
      return from_allocation(a, size, info.device_id, info.start, info.size, info.buffer_id);
    }
  }
  // Memory CUDA does not know: registered for this I/O alone.  One at a
  // time, so that two threads' overlapping ranges do not collide.
  const int device_id = info.device_id >= 0 ? info.device_id : settings().default_device;
  Target t;
  try {
    if (!info.known) {
      check_unknown_memory(device_id, a, size);
    }
    t.serial = std::unique_lock(serial_mutex_);
    t.reg = register_range(device_id, a, size);
  } catch (const std::system_error &e) {
    throw ShimError(e.code().value() == EINVAL || e.code().value() == EEXIST
                        ? CU_FILE_INVALID_VALUE
                        : op_error_from_errno(e.code().value()),
                    e.what());
  }
  return t;
}

Target Shim::from_allocation(std::uintptr_t address, std::size_t size, int device_id,
                             std::uintptr_t start, std::size_t alloc_size,
                             unsigned long long buffer_id) {  // NOLINT(google-runtime-int)
  std::shared_ptr<const phx::Registration> stale;
  {
    const std::shared_lock lock(buffers_mutex_);
    if (auto it = cache_.find(start);
        it != cache_.end() && it->second.buffer_id == buffer_id && it->second.size == alloc_size) {
      return Target{it->second.reg, address - start, {}};
    }
  }
  {
    // Freed and allocated again at the same address: not the same memory.
    const std::unique_lock lock(buffers_mutex_);
    if (auto it = cache_.find(start); it != cache_.end() && it->second.buffer_id != buffer_id) {
      stale = std::move(it->second.reg);
      cache_.erase(it);
    }
  }
  stale.reset();
  try {
    auto reg = register_range(device_id, start, alloc_size);
    std::vector<std::shared_ptr<const phx::Registration>> evicted;
    const std::unique_lock lock(buffers_mutex_);
    while (cache_.size() >= settings().cache_entries) {
      evicted.push_back(std::move(cache_.begin()->second.reg));
      cache_.erase(cache_.begin());
    }
    cache_[start] = CachedAllocation{alloc_size, buffer_id, reg};
    return Target{std::move(reg), address - start, {}};
  } catch (const std::system_error &e) {
    if (e.code().value() != EEXIST && e.code().value() != EINVAL) {
      throw ShimError(op_error_from_errno(e.code().value()), e.what());
    }
  }
  // EEXIST: another thread registered the allocation first.
  {
    const std::shared_lock lock(buffers_mutex_);
    if (auto it = cache_.find(start); it != cache_.end() && it->second.buffer_id == buffer_id) {
      return Target{it->second.reg, address - start, {}};
    }
  }
  // EINVAL: a registered buffer covers part of the allocation; register
  // just this range for this I/O.
  Target t;
  t.serial = std::unique_lock(serial_mutex_);
  try {
    t.reg = register_range(device_id, address, size);
  } catch (const std::system_error &e) {
    throw ShimError(e.code().value() == EINVAL || e.code().value() == EEXIST
                        ? CU_FILE_INVALID_VALUE
                        : op_error_from_errno(e.code().value()),
                    std::string(e.what()) + " (the range overlaps a registered buffer)");
  }
  return t;
}

void Shim::register_stream(CUstream stream, unsigned flags) {
  if (flags > 0xfU) {
    throw ShimError(CU_FILE_INVALID_VALUE, "stream flags " + std::to_string(flags));
  }
  const std::lock_guard lock(streams_mutex_);
  streams_[stream] = flags;
}

void Shim::deregister_stream(CUstream stream) {
  const std::lock_guard lock(streams_mutex_);
  streams_.erase(stream);
}

}  // namespace phx::cufile_shim
