// SPDX-License-Identifier: MIT
// Phoenix device ids and CUDA devices.  Device id N is the N-th CUDA GPU in
// PCI bus order (domain, bus, device, function ascending), the order in
// which phxfs.ko numbers /dev/phxfs_devN, so both name the same GPU whatever
// CUDA_DEVICE_ORDER or CUDA_VISIBLE_DEVICES say about CUDA's own ordinals.
#ifndef PHOENIX_LIB_CUDA_GPU_HPP
#define PHOENIX_LIB_CUDA_GPU_HPP

#include <memory>
#include <optional>
#include <string>

#include "cuda/driver_api.hpp"

namespace phx::detail::cuda {

struct GpuIdentity {
  int ordinal = -1;     ///< CUDA ordinal (cuDeviceGet)
  std::string pci_bus;  ///< "0000:3b:00.0"
};

/// The GPU behind Phoenix device @p device_id, or nullopt with @p why set
/// (no driver, fewer GPUs).
[[nodiscard]] std::optional<GpuIdentity> gpu_for_device(int device_id, std::string &why);

/// CUDA GPUs visible to this process (0 without a driver).
[[nodiscard]] int gpu_count() noexcept;

/// One GPU with its primary context retained (the context the CUDA runtime
/// uses, so runtime allocations and streams belong to it).
class Gpu {
 public:
  /// Throws std::system_error(ENODEV) when device @p device_id has no GPU.
  explicit Gpu(int device_id);
  ~Gpu();
  Gpu(const Gpu &) = delete;
  Gpu &operator=(const Gpu &) = delete;
  Gpu(Gpu &&) = delete;
  Gpu &operator=(Gpu &&) = delete;

  [[nodiscard]] int device_id() const noexcept { return device_id_; }
  [[nodiscard]] const GpuIdentity &identity() const noexcept { return identity_; }
  [[nodiscard]] CUcontext context() const noexcept { return context_; }
  /// Makes the primary context current on the calling thread (pool threads).
  void make_current() const;

 private:
  int device_id_;
  GpuIdentity identity_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

/// Where a pointer lives, by cuPointerGetAttribute.
struct PointerInfo {
  bool cuda_known = false;  ///< CUDA knows the address (allocated or registered)
  unsigned memory_type = 0;
  bool managed = false;
  int ordinal = -1;
  CUdeviceptr range_start = 0;
  std::size_t range_size = 0;
  /// Unique over the process's life: a later allocation at the same
  /// address has another (0: unknown).
  unsigned long long buffer_id = 0;  // NOLINT(google-runtime-int): the ABI's type
};
[[nodiscard]] PointerInfo query_pointer(const Driver &d, std::uintptr_t address) noexcept;

/// The buffer ID of the CUDA allocation holding @p address; 0 when CUDA
/// knows no allocation there (never allocated, or freed).  One driver call.
[[nodiscard]] unsigned long long buffer_id(const Driver &d,  // NOLINT(google-runtime-int)
                                           std::uintptr_t address) noexcept;

}  // namespace phx::detail::cuda

#endif  // PHOENIX_LIB_CUDA_GPU_HPP
