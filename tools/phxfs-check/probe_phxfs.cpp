// SPDX-License-Identifier: MIT
// The phxfs module, the devices it serves (GET_INFO through the library), and
// the engine the library would choose.
#include <algorithm>
#include <charconv>
#include <exception>
#include <string_view>

#include "phoenix/phoenix.hpp"
#include "phxfs_ioctl.h"
#include "probes.hpp"
#include "sysfs.hpp"

namespace phxcheck {
namespace {

// N of "phxfs_devN", or -1 for any other name.
int device_index(std::string_view name) {
  constexpr std::string_view kPrefix = "phxfs_dev";
  if (!name.starts_with(kPrefix) || name.size() == kPrefix.size()) {
    return -1;
  }
  const std::string_view digits = name.substr(kPrefix.size());
  int index = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    return -1;
  }
  return index;
}

}  // namespace

PhxfsModule probe_phxfs_module() {
  PhxfsModule module;
  module.loaded = path_exists("/sys/module/phxfs");
  module.version = read_line("/sys/module/phxfs/version");

  // Nodes are listed even when the module is not loaded: a stale node left in
  // /dev is worth reporting, and the query says what is wrong with it.
  constexpr std::string_view kPrefix = PHXFS_DEVICE_PREFIX;
  const std::string dir(kPrefix.substr(0, kPrefix.rfind('/')));
  const auto names = list_dir(dir, module.scan_error);
  if (!names) {
    return module;
  }
  for (const auto &name : *names) {
    const int index = device_index(name);
    if (index < 0) {
      continue;
    }
    ModuleDevice device;
    device.index = index;
    device.node = dir;
    device.node.append("/").append(name);
    try {
      device.info = phx::query_module_device(index);
    } catch (const std::exception &e) {
      device.error = e.what();
    }
    module.devices.push_back(std::move(device));
  }
  std::sort(module.devices.begin(), module.devices.end(),
            [](const ModuleDevice &a, const ModuleDevice &b) { return a.index < b.index; });
  return module;
}

EngineInfo probe_engine(int device_id) {
  EngineInfo info;
  info.device = device_id;
  try {
    const phx::EngineChoice choice = phx::choose_engine(device_id);
    info.engine = std::string(phx::to_string(choice.engine));
    info.reason = choice.reason;
  } catch (const std::exception &e) {
    // A bad PHX_ENGINE lands here; the library would refuse to open too.
    info.error = e.what();
  }
  return info;
}

}  // namespace phxcheck
