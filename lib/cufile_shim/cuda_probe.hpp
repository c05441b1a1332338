// SPDX-License-Identifier: MIT
// Which GPU a buffer belongs to.  libphoenix's public API does not say
// (what the shim would want: phx::device_for_pointer(p) -> device id and
// allocation range), so the shim asks the CUDA driver itself: its own small
// dlopen of the driver libphoenix loads (PHX_CUDA_DRIVER, else
// libcuda.so.1), cuPointerGetAttribute, and libphoenix's rule for device
// ids: device N is the N-th CUDA GPU in PCI bus order.
#ifndef PHOENIX_CUFILE_SHIM_CUDA_PROBE_HPP
#define PHOENIX_CUFILE_SHIM_CUDA_PROBE_HPP

#include <cstddef>
#include <cstdint>

namespace phx::cufile_shim {

struct PointerInfo {
  bool known = false;          ///< the CUDA driver knows the address
  bool device_memory = false;  ///< CU_MEMORYTYPE_DEVICE, not managed
  int device_id = -1;          ///< Phoenix device id (PCI order), -1 if unknown
  std::uintptr_t start = 0;    ///< the allocation holding the address
  std::size_t size = 0;
  unsigned long long buffer_id = 0;  // NOLINT(google-runtime-int): the ABI's type
};

/// What CUDA says about @p address; {known = false} without a driver.
[[nodiscard]] PointerInfo probe_pointer(const void *address) noexcept;

}  // namespace phx::cufile_shim

#endif  // PHOENIX_CUFILE_SHIM_CUDA_PROBE_HPP
