// SPDX-License-Identifier: MIT
// One function per probe; each fills its part of the report and never throws
// for a condition of the machine (only std::bad_alloc can escape).
#ifndef PHXFS_CHECK_PROBES_HPP
#define PHXFS_CHECK_PROBES_HPP

#include <string>

#include "report.hpp"

namespace phxcheck {

[[nodiscard]] KernelInfo probe_kernel();
[[nodiscard]] KernelConfig probe_kernel_config(const std::string &release);
[[nodiscard]] IommuInfo probe_iommu(const KernelConfig &config);
[[nodiscard]] PhxfsModule probe_phxfs_module();
[[nodiscard]] PathProbe probe_path(const std::string &path);
[[nodiscard]] CudaInfo probe_cuda();
[[nodiscard]] NvidiaInfo probe_nvidia();
[[nodiscard]] EngineInfo probe_engine(int device_id);

}  // namespace phxcheck

#endif  // PHXFS_CHECK_PROBES_HPP
