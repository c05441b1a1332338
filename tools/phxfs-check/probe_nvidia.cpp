// SPDX-License-Identifier: MIT
// NVIDIA's kernel side: the nvidia module and the nvidia_p2p_* symbols that
// phxfs's NVIDIA provider resolves with symbol_get at run time.
#include <fstream>
#include <sstream>
#include <string>

#include "probes.hpp"
#include "sysfs.hpp"

namespace phxcheck {

NvidiaInfo probe_nvidia() {
  NvidiaInfo info;
  info.module_loaded = path_exists("/sys/module/nvidia");
  info.module_version = read_line("/sys/module/nvidia/version");

  // kallsyms lists names even when kptr_restrict hides the addresses, so
  // reading it needs no privilege; it is only absent on locked-down kernels.
  std::ifstream kallsyms("/proc/kallsyms");
  if (!kallsyms) {
    info.p2p_note = "/proc/kallsyms not readable";
    return info;
  }
  bool any_line = false;
  bool get_pages = false;
  bool persistent = false;
  std::string line;
  while (std::getline(kallsyms, line)) {
    any_line = true;
    // Cheap filter first: kallsyms has hundreds of thousands of lines.
    if (line.find("nvidia_p2p_get_pages") == std::string::npos) {
      continue;
    }
    // "<address> <type> <name>[\t[<module>]]"
    std::istringstream fields(line);
    std::string address;
    std::string type;
    std::string name;
    std::string owner;
    fields >> address >> type >> name >> owner;
    const bool is_get_pages = name == "nvidia_p2p_get_pages";
    const bool is_persistent = name == "nvidia_p2p_get_pages_persistent";
    if (!is_get_pages && !is_persistent) {
      continue;
    }
    get_pages = get_pages || is_get_pages;
    persistent = persistent || is_persistent;
    if (owner.size() > 2 && owner.front() == '[' && owner.back() == ']') {
      info.p2p_owner = owner.substr(1, owner.size() - 2);
    }
  }
  if (!any_line) {
    info.p2p_note = "/proc/kallsyms is empty (kallsyms disabled or restricted)";
    return info;
  }
  info.p2p_get_pages = get_pages;
  info.p2p_get_pages_persistent = persistent;
  if (get_pages) {
    info.p2p_note = info.p2p_owner.empty() ? "in /proc/kallsyms (built into the kernel)"
                                           : "in /proc/kallsyms, from module " + info.p2p_owner;
  } else {
    info.p2p_note = info.module_loaded ? "not in /proc/kallsyms although nvidia is loaded"
                                       : "not in /proc/kallsyms (no module provides it)";
  }
  return info;
}

}  // namespace phxcheck
