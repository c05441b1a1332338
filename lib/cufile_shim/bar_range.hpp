// SPDX-License-Identifier: MIT
// Memory the CUDA driver does not know, on a device whose memory is a PCI
// BAR that phxfs serves (PHXFS_PROVIDER_PCIBAR: the rig's ivshmem standing
// in for a GPU, an FPGA, an NVMe CMB).  There a device address is a byte
// offset into the BAR, and no driver says which offsets an application
// owns.  What the shim can prove: the range lies inside the BAR the module
// reports, and it is not this process's own memory (a small offset is also
// a valid host address in a program mapped low, such as a static
// executable's heap; such a pointer could be either, so it is refused).
// The module's REGISTER then checks the range again and takes its pages.
#ifndef PHOENIX_CUFILE_SHIM_BAR_RANGE_HPP
#define PHOENIX_CUFILE_SHIM_BAR_RANGE_HPP

#include <cstddef>
#include <cstdint>

namespace phx::cufile_shim {

enum class BarRange {
  inside,       ///< [start, start + size) lies in [0, bar_size) and is not host memory
  past_end,     ///< starts inside the BAR and runs past its end
  outside,      ///< starts at or beyond the BAR's end
  host_memory,  ///< inside, but (part of) it is mapped in this process
};

/// Where [start, start + size) lies against a BAR of @p bar_size bytes;
/// @p mapped says whether any of it is mapped in this process.
[[nodiscard]] BarRange classify_bar_range(std::uint64_t bar_size, std::uintptr_t start,
                                          std::size_t size, bool mapped) noexcept;

/// Whether any byte of [start, start + size) is mapped in this process
/// (/proc/self/maps).  True when that cannot be read: unproven is refused.
[[nodiscard]] bool mapped_in_process(std::uintptr_t start, std::size_t size) noexcept;

}  // namespace phx::cufile_shim

#endif  // PHOENIX_CUFILE_SHIM_BAR_RANGE_HPP
