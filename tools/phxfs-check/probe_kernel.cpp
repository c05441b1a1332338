// SPDX-License-Identifier: MIT
// The running kernel's identity (uname) and the build options Phoenix cares
// about (CONFIG_PCI_P2PDMA, CONFIG_ZONE_DEVICE), read from its config file.
#include <sys/utsname.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "probes.hpp"
#include "sysfs.hpp"

namespace phxcheck {
namespace {

// "y", "m", the literal value, or "n" when the option is "not set" or absent:
// Kconfig omits options whose dependencies are off, which also means "n".
std::string config_value(std::string_view text, std::string_view option) {
  const std::string set = std::string(option) + "=";
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    const std::string_view line = text.substr(pos, end - pos);
    if (line.starts_with(set)) {
      return std::string(trim(line.substr(set.size())));
    }
    pos = end + 1;
  }
  return "n";
}

// Kernels built with CONFIG_IKCONFIG_PROC expose their config only gzipped.
std::optional<std::string> read_gzip_text(const char *path) {
  gzFile file = gzopen(path, "rb");
  if (file == nullptr) {
    return std::nullopt;
  }
  std::string text;
  std::array<char, 65536> chunk{};
  int n = 0;
  while ((n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()))) > 0) {
    text.append(chunk.data(), static_cast<std::size_t>(n));
  }
  const bool ok = n == 0;
  gzclose(file);
  if (!ok) {
    return std::nullopt;
  }
  return text;
}

void fill_config(KernelConfig &config, std::string_view text, std::string source) {
  config.source = std::move(source);
  config.pci_p2pdma = config_value(text, "CONFIG_PCI_P2PDMA");
  config.zone_device = config_value(text, "CONFIG_ZONE_DEVICE");
  config.iommu_default_passthrough = config_value(text, "CONFIG_IOMMU_DEFAULT_PASSTHROUGH");
}

}  // namespace

KernelInfo probe_kernel() {
  KernelInfo info;
  struct utsname uts = {};
  if (::uname(&uts) != 0) {
    info.error = "uname: " + errno_message(errno);
    return info;
  }
  info.sysname = uts.sysname;
  info.release = uts.release;
  info.version = uts.version;
  info.machine = uts.machine;
  return info;
}

KernelConfig probe_kernel_config(const std::string &release) {
  KernelConfig config;
  if (release.empty()) {
    config.note = "kernel release unknown";
    return config;
  }
  const std::array<std::string, 2> candidates = {"/boot/config-" + release,
                                                 "/lib/modules/" + release + "/build/.config"};
  for (const auto &path : candidates) {
    std::string error;
    const auto text = read_text(path, error);
    if (!text) {
      continue;
    }
    fill_config(config, *text, path);
    return config;
  }
  if (const auto text = read_gzip_text("/proc/config.gz")) {
    fill_config(config, *text, "/proc/config.gz");
    return config;
  }
  config.note = "no kernel config found (tried " + candidates[0] + ", " + candidates[1] +
                ", /proc/config.gz)";
  return config;
}

}  // namespace phxcheck
