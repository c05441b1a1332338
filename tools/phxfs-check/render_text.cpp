// SPDX-License-Identifier: MIT
// The human report, laid out like NVIDIA's gdscheck: sections of
// "key : value" lines with one key column for the whole report, so that a
// pasted report reads as a table.
#include <algorithm>
#include <array>
#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

#include "phxfs_ioctl.h"
#include "render.hpp"

namespace phxcheck {
namespace {

struct Section {
  std::string title;
  std::vector<std::pair<std::string, std::string>> rows;

  void add(std::string key, std::string value) {
    rows.emplace_back(std::move(key), std::move(value));
  }
};

std::string yes_no(bool value) {
  return value ? "yes" : "no";
}

std::string or_unknown(const std::string &text) {
  return text.empty() ? "unknown" : text;
}

// "256 GiB (274877906944)": the exact count stays for pasting into bug reports.
std::string human_bytes(std::uint64_t bytes) {
  constexpr std::array<std::string_view, 5> kUnits = {"B", "KiB", "MiB", "GiB", "TiB"};
  auto value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  std::array<char, 32> text{};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): snprintf is variadic
  std::snprintf(text.data(), text.size(), "%.4g %s", value, kUnits.at(unit).data());
  return std::string(text.data()) + " (" + std::to_string(bytes) + ")";
}

// The "config file" line already says why the values are unknown.
std::string config_text(const std::optional<std::string> &value) {
  if (!value) {
    return "unknown";
  }
  return *value == "n" ? "not set" : *value;
}

Section kernel_section(const Report &r) {
  Section s{"KERNEL", {}};
  if (!r.kernel.error.empty()) {
    s.add("kernel", r.kernel.error);
  } else {
    s.add("release", r.kernel.release);
    s.add("version", r.kernel.version);
    s.add("machine", r.kernel.machine);
  }
  s.add("config file", r.kernel_config.source.value_or(r.kernel_config.note));
  s.add("CONFIG_PCI_P2PDMA", config_text(r.kernel_config.pci_p2pdma));
  s.add("CONFIG_ZONE_DEVICE", config_text(r.kernel_config.zone_device));
  return s;
}

std::string flags_text(std::uint32_t flags) {
  std::string text = std::to_string(flags);
  if ((flags & PHXFS_INFO_P2PDMA) != 0U) {
    text += " p2pdma";
  }
  if ((flags & PHXFS_INFO_PERSISTENT) != 0U) {
    text += " persistent";
  }
  if ((flags & PHXFS_INFO_PROVIDER_MISSING) != 0U) {
    text +=
        " provider-missing (the NVIDIA driver is not loaded: registrations fail with ENODEV "
        "until it is; phxfs picks it up without a reload)";
  }
  if ((flags & PHXFS_INFO_PIN_REFUSED) != 0U) {
    text +=
        " pin-refused (the NVIDIA driver gives no persistent pin here, as on MIG and vGPU: "
        "registrations fail with EOPNOTSUPP; nv_api=legacy accepts revocable pins, "
        "docs/security.md)";
  }
  return text;
}

void add_device(Section &s, const ModuleDevice &d) {
  const std::string key = "dev" + std::to_string(d.index) + " ";
  s.add(key + "node", d.node);
  if (!d.info) {
    s.add(key + "query", "failed: " + d.error);
    return;
  }
  const phx::ModuleDeviceInfo &i = *d.info;
  s.add(key + "provider", i.provider_name + " (" + std::to_string(i.provider) + ")");
  s.add(key + "pci address", pci_address(i.pci_domain, i.pci_bdf));
  s.add(key + "abi version", std::to_string(i.abi_version));
  s.add(key + "page size", std::to_string(i.page_size));
  s.add(key + "bar size", human_bytes(i.bar_size));
  s.add(key + "flags", flags_text(i.flags));
  s.add(key + "registrations",
        std::to_string(i.regs_live) + " live, " + std::to_string(i.regs_total) + " since load");
  s.add(key + "pages mapped", std::to_string(i.pages_mapped));
  s.add(key + "revocations", std::to_string(i.revocations));
  s.add(key + "errors", std::to_string(i.errors));
}

Section module_section(const Report &r) {
  Section s{"PHXFS MODULE", {}};
  s.add("phxfs loaded",
        yes_no(r.phxfs.loaded) + (r.phxfs.loaded ? "" : " (/sys/module/phxfs absent)"));
  if (r.phxfs.version) {
    s.add("phxfs version", *r.phxfs.version);
  }
  if (!r.phxfs.scan_error.empty()) {
    s.add("devices", "unknown (" + r.phxfs.scan_error + ")");
  } else if (r.phxfs.devices.empty()) {
    s.add("devices", std::string("none (no ") + PHXFS_DEVICE_PREFIX + "N)");
  } else {
    s.add("devices", std::to_string(r.phxfs.devices.size()));
  }
  for (const auto &d : r.phxfs.devices) {
    add_device(s, d);
  }
  return s;
}

std::string count_text(const std::optional<std::size_t> &n) {
  return n ? std::to_string(*n) : "unknown";
}

Section iommu_section(const Report &r) {
  const IommuInfo &i = r.iommu;
  Section s{"IOMMU", {}};
  s.add("iommu", i.state);
  s.add("reason", i.reason);
  s.add("/sys/class/iommu entries", count_text(i.sysfs_entries));
  std::string groups = count_text(i.groups);
  if (!i.group_types.empty()) {
    std::string types;
    for (const auto &[type, count] : i.group_types) {
      types += (types.empty() ? "" : ", ") + type + " " + std::to_string(count);
    }
    groups += " (" + types + ")";
  }
  s.add("iommu groups", groups);
  std::string options;
  for (const auto &o : i.cmdline_options) {
    options += (options.empty() ? "" : " ") + o;
  }
  if (!i.cmdline_error.empty()) {
    options = "unknown (" + i.cmdline_error + ")";
  }
  s.add("cmdline options", options.empty() ? "none" : options);
  return s;
}

std::string odirect_text(const PathProbe &p) {
  const std::string verdict = !p.o_direct ? "unknown" : yes_no(*p.o_direct);
  return p.o_direct_reason.empty() ? verdict : verdict + " (" + p.o_direct_reason + ")";
}

Section path_section(const Report &r) {
  Section s{"FILESYSTEMS", {}};
  for (const auto &p : r.paths) {
    s.add("path", p.path);
    if (!p.error.empty()) {
      s.add("  error", p.error);
      continue;
    }
    s.add("  kind", p.kind);
    s.add("  filesystem", or_unknown(p.fs_type));
    if (!p.method.empty()) {
      s.add("  probe", p.method);
    }
    s.add("  O_DIRECT", odirect_text(p));
    if (p.dio_mem_align && p.dio_offset_align) {
      s.add("  dio alignment", "memory " + std::to_string(*p.dio_mem_align) + ", offset " +
                                   std::to_string(*p.dio_offset_align));
    } else if (!p.dio_align_note.empty()) {
      s.add("  dio alignment", p.dio_align_note);
    }
  }
  return s;
}

std::string driver_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

Section gpu_section(const Report &r) {
  const CudaInfo &c = r.cuda;
  Section s{"GPU", {}};
  s.add("cuda device visible", c.status);
  if (c.library) {
    s.add("libcuda", *c.library);
  }
  if (c.driver_version) {
    s.add("cuda driver api", driver_version_text(*c.driver_version));
  }
  if (c.visible_devices) {
    s.add("CUDA_VISIBLE_DEVICES", *c.visible_devices);
  }
  for (const auto &d : c.devices) {
    const std::string key = "gpu" + std::to_string(d.index) + " ";
    if (!d.error.empty()) {
      s.add(key + "error", d.error);
      continue;
    }
    s.add(key + "name", d.name);
    s.add(key + "pci bus id", d.pci_bus_id);
    if (d.memory_bytes) {
      s.add(key + "memory", human_bytes(*d.memory_bytes));
    }
  }
  const NvidiaInfo &n = r.nvidia;
  s.add("nvidia module loaded", yes_no(n.module_loaded));
  if (n.module_version) {
    s.add("nvidia module version", *n.module_version);
  }
  const std::string p2p = n.p2p_get_pages ? yes_no(*n.p2p_get_pages) : "unknown";
  s.add("nvidia_p2p_get_pages", p2p + " (" + n.p2p_note + ")");
  if (n.p2p_get_pages_persistent) {
    s.add("nvidia_p2p_get_pages_persistent", yes_no(*n.p2p_get_pages_persistent));
  }
  return s;
}

Section engine_section(const Report &r) {
  Section s{"ENGINE", {}};
  s.add("libphoenix version", r.library_version);
  const std::string key = "auto engine (device " + std::to_string(r.engine.device) + ")";
  if (r.engine.engine) {
    s.add(key, *r.engine.engine);
    s.add("reason", r.engine.reason);
  } else {
    s.add(key, "unknown (" + r.engine.error + ")");
  }
  return s;
}

}  // namespace

std::string pci_address(std::uint32_t domain, std::uint32_t bdf) {
  const unsigned bus = (bdf >> 8U) & 0xffU;
  const unsigned device = (bdf >> 3U) & 0x1fU;
  const unsigned function = bdf & 0x7U;
  std::array<char, 32> text{};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): snprintf is variadic
  std::snprintf(text.data(), text.size(), "%04x:%02x:%02x.%x", domain, bus, device, function);
  return text.data();
}

void render_text(const Report &report, std::ostream &out) {
  const std::vector<Section> sections = {kernel_section(report), module_section(report),
                                         iommu_section(report),  path_section(report),
                                         gpu_section(report),    engine_section(report)};
  std::size_t width = 0;
  for (const auto &section : sections) {
    for (const auto &row : section.rows) {
      width = std::max(width, row.first.size());
    }
  }
  out << " phxfs-check " << report.tool_version << '\n';
  for (const auto &section : sections) {
    out << " ============\n " << section.title << "\n ============\n";
    for (const auto &[key, value] : section.rows) {
      out << ' ' << key << std::string(width - key.size(), ' ') << " : " << value << '\n';
    }
  }
}

}  // namespace phxcheck
