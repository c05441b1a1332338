// SPDX-License-Identifier: MIT
// phxfs-check: can this machine do Phoenix GPU Direct Storage I/O, and if not,
// what is missing?  The counterpart of NVIDIA's `gdscheck -p`.
//
// Exit status: 0 when the report was produced (whatever it says), 2 on bad
// arguments, 1 only if the tool itself failed.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "phoenix/config.h"
#include "phoenix/phoenix.h"
#include "phxfs_ioctl.h"
#include "probes.hpp"
#include "render.hpp"

namespace {

constexpr int kExitUsage = 2;

struct Options {
  bool json = false;
  int device = 0;
  std::vector<std::string> paths;
};

phxcheck::Report build_report(const Options &options) {
  phxcheck::Report report;
  report.tool_version = PHOENIX_VERSION_STRING;
  report.library_version = phxfs_version();
  report.kernel = phxcheck::probe_kernel();
  report.kernel_config = phxcheck::probe_kernel_config(report.kernel.release);
  report.phxfs = phxcheck::probe_phxfs_module();
  report.iommu = phxcheck::probe_iommu(report.kernel_config);
  for (const auto &path : options.paths) {
    report.paths.push_back(phxcheck::probe_path(path));
  }
  report.cuda = phxcheck::probe_cuda();
  report.nvidia = phxcheck::probe_nvidia();
  report.engine = phxcheck::probe_engine(options.device);
  return report;
}

}  // namespace

int main(int argc, char **argv) {
  Options options;
  CLI::App app{
      "Reports whether this machine can run Phoenix GPU Direct Storage I/O: kernel, "
      "phxfs module, IOMMU, O_DIRECT support of filesystems, CUDA, and the engine "
      "libphoenix would pick.",
      "phxfs-check"};
  app.set_version_flag("--version", std::string("phxfs-check ") + PHOENIX_VERSION_STRING +
                                        " (libphoenix " + phxfs_version() + ")");
  app.add_flag("--json", options.json, "Print one JSON object instead of the report");
  app.add_option("--device", options.device,
                 "Device whose engine choice to report (N of /dev/phxfs_devN)")
      ->check(CLI::Range(0, static_cast<int>(PHXFS_MAX_DEVICES) - 1))
      ->capture_default_str();
  app.add_option("--path", options.paths,
                 "Directory, file or block device to test for O_DIRECT (repeatable; "
                 "default: the current directory)")
      ->allow_extra_args(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    // --help and --version arrive here too, with exit code 0.
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  if (options.paths.empty()) {
    options.paths.emplace_back(".");
  }

  try {
    const phxcheck::Report report = build_report(options);
    if (options.json) {
      phxcheck::render_json(report, std::cout);
    } else {
      phxcheck::render_text(report, std::cout);
    }
    std::cout.flush();
    return std::cout ? 0 : 1;
  } catch (const std::exception &e) {
    std::cerr << "phxfs-check: " << e.what() << '\n';
    return 1;
  }
}
