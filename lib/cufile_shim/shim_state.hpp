// SPDX-License-Identifier: MIT
// The shim's process-wide state: the driver's open count, the Phoenix
// devices it opened (one per GPU, lazily), registered file handles,
// registered buffers and the cache of registrations made for I/O on
// unregistered buffers.  Built on libphoenix's public API only.
#ifndef PHOENIX_CUFILE_SHIM_SHIM_STATE_HPP
#define PHOENIX_CUFILE_SHIM_SHIM_STATE_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "cufile_shim/cufile_abi.h"
#include "phoenix/phoenix.hpp"

namespace phx::cufile_shim {

/// A registered file: the caller's descriptor, reopened through
/// /proc/self/fd as a phx::File (libphoenix has no File over a borrowed
/// descriptor; the shim would want phx::File::borrow(fd)).
class Handle {
 public:
  explicit Handle(int fd);
  [[nodiscard]] int fd() const noexcept { return fd_; }
  /// The file to move bytes with: DirectIo::automatic over an O_DIRECT
  /// descriptor (each read by the page cache), buffered over a buffered one.
  [[nodiscard]] phx::File &file() noexcept { return file_; }

 private:
  int fd_;
  phx::File file_;
};

/// Where an I/O lands: a registration and the offset in it.  @c serial is
/// held while a registration made for this one I/O is alive (memory CUDA
/// does not know is registered per call, one at a time).
struct Target {
  std::shared_ptr<const phx::Registration> reg;
  std::size_t offset = 0;
  std::unique_lock<std::mutex> serial;
};

class Shim {
 public:
  /// The one instance; never destroyed, so calls during exit stay valid.
  static Shim &get();

  // Driver.  Every other call opens the driver implicitly, as cuFile does.
  void open();
  [[nodiscard]] CUfileOpError close();
  /// Whatever the count: every registered buffer and cached registration
  /// released, the devices closed, the count back to zero.  Handles stay.
  /// (libphxfile's phxFileDriverClose; registrations in use by I/O live on
  /// until it ends.)
  void reset();
  [[nodiscard]] long use_count() const;
  void ensure_open();

  // File handles: the key is what cuFileHandleRegister hands out.
  [[nodiscard]] void *add_handle(int fd);
  /// False when @p key is not a registered handle.
  bool remove_handle(void *key);
  /// Throws ShimError(CU_FILE_HANDLE_NOT_REGISTERED) for an unknown key.
  [[nodiscard]] std::shared_ptr<Handle> handle(void *key) const;

  // Buffers.
  void register_buffer(const void *address, std::size_t size);
  void deregister_buffer(const void *address);

  /// The registration serving [address, address + size): a registered
  /// buffer containing it, else the cached registration of its CUDA
  /// allocation, else one made for this I/O.  Throws ShimError.
  [[nodiscard]] Target resolve(const void *address, std::size_t size);

  // Streams (recorded; the values are always read at submission).
  void register_stream(CUstream stream, unsigned flags);
  void deregister_stream(CUstream stream);

 private:
  Shim() = default;
  struct Buffer {
    std::size_t size = 0;
    std::shared_ptr<const phx::Registration> reg;
  };
  struct CachedAllocation {
    std::size_t size = 0;
    unsigned long long buffer_id = 0;  // NOLINT(google-runtime-int): CUDA's type
    std::shared_ptr<const phx::Registration> reg;
  };

  /// An opened device; pcibar_size is its BAR's size when phxfs serves it
  /// with the PCI BAR provider (device addresses are BAR offsets), else 0.
  struct OpenDevice {
    std::shared_ptr<phx::Device> dev;
    std::uint64_t pcibar_size = 0;
  };
  OpenDevice device(int device_id);
  /// Memory CUDA does not know, about to be registered on @p device_id:
  /// on a PCI BAR device it must lie inside the BAR and not be host memory
  /// (bar_range.hpp); other engines prove it themselves (the host engine
  /// that it is mapped, compat and NVIDIA's provider through CUDA).
  /// Throws ShimError.
  void check_unknown_memory(int device_id, std::uintptr_t start, std::size_t size);
  [[nodiscard]] std::shared_ptr<const phx::Registration> register_range(int device_id,
                                                                        std::uintptr_t start,
                                                                        std::size_t size);
  Target from_allocation(std::uintptr_t address, std::size_t size, int device_id,
                         std::uintptr_t start, std::size_t alloc_size,
                         unsigned long long buffer_id);  // NOLINT(google-runtime-int)

  mutable std::mutex driver_mutex_;
  long opens_ = 0;
  bool implicit_ = false;
  std::atomic<bool> active_{false};    // opens_ > 0 || implicit_: no lock per I/O
  std::map<int, OpenDevice> devices_;  // under driver_mutex_

  mutable std::shared_mutex handles_mutex_;
  std::map<void *, std::shared_ptr<Handle>> handles_;

  mutable std::shared_mutex buffers_mutex_;
  std::map<std::uintptr_t, Buffer> buffers_;          // by start address
  std::map<std::uintptr_t, CachedAllocation> cache_;  // by allocation start

  std::mutex serial_mutex_;  // per-call registrations

  std::mutex streams_mutex_;
  std::map<CUstream, unsigned> streams_;
};

}  // namespace phx::cufile_shim

#endif  // PHOENIX_CUFILE_SHIM_SHIM_STATE_HPP
