// SPDX-License-Identifier: MIT
// Keys are part of the tool's interface: every key is always present (null
// when unknown) so that scripts can index without checking.
#include <nlohmann/json.hpp>

#include "common/json_record.hpp"
#include "phxfs_ioctl.h"
#include "render.hpp"

namespace phxcheck {
namespace {

using Json = nlohmann::ordered_json;

Json text_or_null(const std::string &text) {
  return text.empty() ? Json() : Json(text);
}

Json flag_names(std::uint32_t flags) {
  Json names = Json::array();
  if ((flags & PHXFS_INFO_P2PDMA) != 0U) {
    names.push_back("p2pdma");
  }
  if ((flags & PHXFS_INFO_PERSISTENT) != 0U) {
    names.push_back("persistent");
  }
  if ((flags & PHXFS_INFO_PROVIDER_MISSING) != 0U) {
    names.push_back("provider_missing");
  }
  if ((flags & PHXFS_INFO_PIN_REFUSED) != 0U) {
    names.push_back("pin_refused");
  }
  return names;
}

Json module_info(const phx::ModuleDeviceInfo &info) {
  return {
      {"abi_version", info.abi_version},
      {"device_index", info.device_index},
      {"provider", info.provider},
      {"provider_name", info.provider_name},
      {"pci_domain", info.pci_domain},
      {"pci_bdf", info.pci_bdf},
      {"pci_address", pci_address(info.pci_domain, info.pci_bdf)},
      {"page_size", info.page_size},
      {"flags", info.flags},
      {"flag_names", flag_names(info.flags)},
      {"bar_size", info.bar_size},
      {"regs_live", info.regs_live},
      {"regs_total", info.regs_total},
      {"pages_mapped", info.pages_mapped},
      {"revocations", info.revocations},
      {"errors", info.errors},
  };
}

Json phxfs_module(const PhxfsModule &module) {
  Json devices = Json::array();
  for (const auto &device : module.devices) {
    devices.push_back({
        {"index", device.index},
        {"node", device.node},
        {"ok", device.info.has_value()},
        {"error", text_or_null(device.error)},
        {"info", device.info ? module_info(*device.info) : Json()},
    });
  }
  return {
      {"loaded", module.loaded},
      {"version", phxtools::optional_json(module.version)},
      {"scan_error", text_or_null(module.scan_error)},
      {"devices", devices},
  };
}

Json iommu(const IommuInfo &info) {
  Json types = Json::object();
  for (const auto &[type, count] : info.group_types) {
    types[type] = count;
  }
  return {
      {"state", info.state},
      {"reason", info.reason},
      {"sysfs_entries", phxtools::optional_json(info.sysfs_entries)},
      {"groups", phxtools::optional_json(info.groups)},
      {"group_types", types},
      {"cmdline_options", info.cmdline_options},
      {"cmdline_error", text_or_null(info.cmdline_error)},
  };
}

Json paths(const std::vector<PathProbe> &probes) {
  Json list = Json::array();
  for (const auto &p : probes) {
    list.push_back({
        {"path", p.path},
        {"kind", p.kind},
        {"error", text_or_null(p.error)},
        {"fs_type", text_or_null(p.fs_type)},
        {"fs_magic", phxtools::optional_json(p.fs_magic)},
        {"method", text_or_null(p.method)},
        {"o_direct", phxtools::optional_json(p.o_direct)},
        {"o_direct_reason", text_or_null(p.o_direct_reason)},
        {"dio_mem_align", phxtools::optional_json(p.dio_mem_align)},
        {"dio_offset_align", phxtools::optional_json(p.dio_offset_align)},
        {"dio_align_note", text_or_null(p.dio_align_note)},
    });
  }
  return list;
}

Json cuda(const CudaInfo &info) {
  Json devices = Json::array();
  for (const auto &d : info.devices) {
    devices.push_back({
        {"index", d.index},
        {"name", text_or_null(d.name)},
        {"pci_bus_id", text_or_null(d.pci_bus_id)},
        {"memory_bytes", phxtools::optional_json(d.memory_bytes)},
        {"error", text_or_null(d.error)},
    });
  }
  return {
      {"available", info.available},
      {"status", info.status},
      {"library", phxtools::optional_json(info.library)},
      {"driver_version", phxtools::optional_json(info.driver_version)},
      {"device_count", phxtools::optional_json(info.device_count)},
      {"visible_devices", phxtools::optional_json(info.visible_devices)},
      {"devices", devices},
  };
}

}  // namespace

void render_json(const Report &report, std::ostream &out) {
  const Json root = {
      {"tool_version", report.tool_version},
      {"library_version", report.library_version},
      {"kernel",
       {
           {"sysname", report.kernel.sysname},
           {"release", report.kernel.release},
           {"version", report.kernel.version},
           {"machine", report.kernel.machine},
           {"error", text_or_null(report.kernel.error)},
       }},
      {"kernel_config",
       {
           {"source", phxtools::optional_json(report.kernel_config.source)},
           {"note", text_or_null(report.kernel_config.note)},
           {"pci_p2pdma", phxtools::optional_json(report.kernel_config.pci_p2pdma)},
           {"zone_device", phxtools::optional_json(report.kernel_config.zone_device)},
           {"iommu_default_passthrough",
            phxtools::optional_json(report.kernel_config.iommu_default_passthrough)},
       }},
      {"phxfs_module", phxfs_module(report.phxfs)},
      {"iommu", iommu(report.iommu)},
      {"paths", paths(report.paths)},
      {"cuda", cuda(report.cuda)},
      {"nvidia",
       {
           {"module_loaded", report.nvidia.module_loaded},
           {"module_version", phxtools::optional_json(report.nvidia.module_version)},
           {"p2p_get_pages", phxtools::optional_json(report.nvidia.p2p_get_pages)},
           {"p2p_get_pages_persistent",
            phxtools::optional_json(report.nvidia.p2p_get_pages_persistent)},
           {"p2p_owner", text_or_null(report.nvidia.p2p_owner)},
           {"p2p_note", text_or_null(report.nvidia.p2p_note)},
       }},
      {"engine",
       {
           {"device", report.engine.device},
           {"engine", phxtools::optional_json(report.engine.engine)},
           {"reason", text_or_null(report.engine.reason)},
           {"error", text_or_null(report.engine.error)},
       }},
  };
  // Replace invalid UTF-8 (a device or path name) instead of throwing.
  out << root.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
}

}  // namespace phxcheck
