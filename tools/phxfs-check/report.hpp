// SPDX-License-Identifier: MIT
// Everything phxfs-check finds.  Probes never throw: a failed probe leaves
// its optional values empty and says why in text, so the report is always
// complete and the renderers need no error paths of their own.
#ifndef PHXFS_CHECK_REPORT_HPP
#define PHXFS_CHECK_REPORT_HPP

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "phoenix/phoenix.hpp"

namespace phxcheck {

struct KernelInfo {
  std::string sysname;
  std::string release;
  std::string version;
  std::string machine;
  std::string error;  ///< uname(2) failed
};

/// A CONFIG_ option's value: "y", "m", "n" (not set) or the literal value.
struct KernelConfig {
  std::optional<std::string> source;  ///< file the values came from
  std::string note;                   ///< why the values are unknown
  std::optional<std::string> pci_p2pdma;
  std::optional<std::string> zone_device;
  std::optional<std::string> iommu_default_passthrough;
};

struct IommuInfo {
  std::string state = "unknown";  ///< "off", "on (translation)", "passthrough", "unknown"
  std::string reason;
  std::optional<std::size_t> sysfs_entries;        ///< /sys/class/iommu
  std::optional<std::size_t> groups;               ///< /sys/kernel/iommu_groups
  std::map<std::string, std::size_t> group_types;  ///< default domain type -> groups
  std::vector<std::string> cmdline_options;        ///< iommu options from /proc/cmdline
  std::string cmdline_error;
};

struct ModuleDevice {
  int index = 0;
  std::string node;
  std::optional<phx::ModuleDeviceInfo> info;
  std::string error;  ///< what() of the failed GET_INFO query
};

struct PhxfsModule {
  bool loaded = false;  ///< /sys/module/phxfs exists
  std::optional<std::string> version;
  std::vector<ModuleDevice> devices;
  std::string scan_error;  ///< /dev could not be listed
};

struct PathProbe {
  std::string path;
  std::string kind;   ///< "directory", "regular file", "block device", "missing", "other"
  std::string error;  ///< stat(2) failed
  std::optional<std::uint32_t> fs_magic;
  std::string fs_type;
  std::string method;  ///< how O_DIRECT was tried
  std::optional<bool> o_direct;
  std::string o_direct_reason;
  std::optional<std::uint32_t> dio_mem_align;
  std::optional<std::uint32_t> dio_offset_align;
  std::string dio_align_note;
};

struct CudaDevice {
  int index = 0;
  std::string name;
  std::string pci_bus_id;
  std::optional<std::uint64_t> memory_bytes;
  std::string error;
};

struct CudaInfo {
  bool available = false;  ///< libcuda loaded, cuInit succeeded, at least one device
  std::string status;      ///< "yes (N devices)", "no (libcuda.so.1 not found: ...)", ...
  std::optional<std::string> library;  ///< the file dlopen() loaded
  std::optional<int> driver_version;   ///< cuDriverGetVersion, e.g. 12040
  std::optional<int> device_count;
  std::vector<CudaDevice> devices;
  std::optional<std::string> visible_devices;  ///< CUDA_VISIBLE_DEVICES
};

struct NvidiaInfo {
  bool module_loaded = false;  ///< /sys/module/nvidia exists
  std::optional<std::string> module_version;
  std::optional<bool> p2p_get_pages;
  std::optional<bool> p2p_get_pages_persistent;
  std::string p2p_owner;  ///< module that provides the symbol ("" when built in or absent)
  std::string p2p_note;
};

struct EngineInfo {
  int device = 0;
  std::optional<std::string> engine;
  std::string reason;
  std::string error;
};

struct Report {
  std::string tool_version;
  std::string library_version;
  KernelInfo kernel;
  KernelConfig kernel_config;
  PhxfsModule phxfs;
  IommuInfo iommu;
  std::vector<PathProbe> paths;
  CudaInfo cuda;
  NvidiaInfo nvidia;
  EngineInfo engine;
};

}  // namespace phxcheck

#endif  // PHXFS_CHECK_REPORT_HPP
