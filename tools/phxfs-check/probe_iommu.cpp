// SPDX-License-Identifier: MIT
// Whether DMA from the NVMe controller to the device BAR goes through an
// IOMMU that translates (then the BAR must be mapped through it) or not.
#include <algorithm>
#include <sstream>
#include <string_view>

#include "probes.hpp"
#include "sysfs.hpp"

namespace phxcheck {
namespace {

bool is_iommu_option(std::string_view token) {
  return token.starts_with("iommu=") || token.starts_with("iommu.") ||
         token.starts_with("intel_iommu=") || token.starts_with("amd_iommu=");
}

// The kernel parses these with kstrtobool.
bool is_true(std::string_view value) {
  return value == "1" || value == "y" || value == "Y" || value == "on";
}

bool cmdline_passthrough(const std::vector<std::string> &options) {
  return std::any_of(options.begin(), options.end(), [](const std::string &o) {
    return o == "iommu=pt" ||
           (o.starts_with("iommu.passthrough=") &&
            is_true(std::string_view(o).substr(std::string_view("iommu.passthrough=").size())));
  });
}

bool cmdline_off(const std::vector<std::string> &options) {
  return std::any_of(options.begin(), options.end(), [](const std::string &o) {
    return o == "iommu=off" || o.starts_with("intel_iommu=off") || o.starts_with("amd_iommu=off");
  });
}

void read_cmdline(IommuInfo &info) {
  std::string error;
  const auto text = read_text("/proc/cmdline", error, 65536);
  if (!text) {
    info.cmdline_error = error;
    return;
  }
  std::istringstream in(*text);
  std::string token;
  while (in >> token) {
    if (token == "--") {
      break;  // the rest belongs to init, not the kernel
    }
    if (is_iommu_option(token)) {
      info.cmdline_options.push_back(token);
    }
  }
}

void read_groups(IommuInfo &info) {
  std::string error;
  const auto groups = list_dir("/sys/kernel/iommu_groups", error);
  if (!groups) {
    return;
  }
  info.groups = groups->size();
  for (const auto &group : *groups) {
    // "identity" = passthrough, "DMA"/"DMA-FQ" = translated, "unmanaged" = VFIO.
    const auto type = read_line("/sys/kernel/iommu_groups/" + group + "/type");
    ++info.group_types[type ? *type : "unreadable"];
  }
}

std::size_t count_types(const IommuInfo &info, std::initializer_list<std::string_view> types) {
  std::size_t n = 0;
  for (const auto &[type, count] : info.group_types) {
    if (std::find(types.begin(), types.end(), type) != types.end()) {
      n += count;
    }
  }
  return n;
}

void summarise(IommuInfo &info, const KernelConfig &config) {
  const std::size_t translated = count_types(info, {"DMA", "DMA-FQ"});
  const std::size_t identity = count_types(info, {"identity"});
  const std::string groups = std::to_string(info.groups.value_or(0));
  // The groups' default domain type is what the kernel actually applied, so
  // it outranks the command line and the build default.
  if (translated > 0) {
    info.state = "on (translation)";
    info.reason = std::to_string(translated) + " of " + groups + " IOMMU groups translate DMA";
    return;
  }
  if (identity > 0) {
    info.state = "passthrough";
    info.reason = std::to_string(identity) + " of " + groups + " IOMMU groups are identity-mapped";
    return;
  }
  const bool no_sysfs = info.sysfs_entries.value_or(0) == 0;
  if (no_sysfs && info.groups.value_or(0) == 0 && (info.sysfs_entries || info.groups)) {
    info.state = "off";
    info.reason = "no IOMMU registered (/sys/class/iommu empty, no IOMMU groups)";
    if (cmdline_off(info.cmdline_options)) {
      info.reason += "; disabled on the kernel command line";
    }
    return;
  }
  if (cmdline_passthrough(info.cmdline_options)) {
    info.state = "passthrough";
    info.reason = "requested on the kernel command line";
    return;
  }
  if (!no_sysfs) {
    if (config.iommu_default_passthrough == "y") {
      info.state = "passthrough";
      info.reason = "IOMMU present; kernel built with CONFIG_IOMMU_DEFAULT_PASSTHROUGH=y";
    } else {
      info.state = "on (translation)";
      info.reason = "IOMMU registered, no passthrough option (group types unavailable)";
    }
    return;
  }
  info.state = "unknown";
  info.reason = "/sys/class/iommu and /sys/kernel/iommu_groups are not readable";
}

}  // namespace

IommuInfo probe_iommu(const KernelConfig &config) {
  IommuInfo info;
  std::string error;
  if (const auto entries = list_dir("/sys/class/iommu", error)) {
    info.sysfs_entries = entries->size();
  } else if (path_exists("/sys/class")) {
    // A kernel built without IOMMU support has no iommu class at all.
    info.sysfs_entries = 0;
  }
  read_groups(info);
  read_cmdline(info);
  summarise(info, config);
  return info;
}

}  // namespace phxcheck
