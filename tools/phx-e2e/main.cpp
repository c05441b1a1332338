// SPDX-License-Identifier: MIT
// phx-e2e: the paper's end-to-end experiments per engine.  Fig 8a: a small
// read that registers its buffer, reads and deregisters, against the read
// alone on a buffer registered before.  Fig 8b: loading a whole 1-4 GiB file
// into device memory, with the driver, file and buffer steps around the
// read timed one by one.  Both report the software share of the time.
//
// Exit status: 0 measured; 1 a step of some engine failed (the others are
// still measured); 2 bad arguments, or no engine asked for can run here;
// 3 --verify found wrong bytes.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "common/cli.hpp"
#include "common/engine_spec.hpp"
#include "common/pattern_file.hpp"
#include "common/units.hpp"
#include "e2e_config.hpp"
#include "experiments.hpp"
#include "loader.hpp"
#include "phoenix/config.h"
#include "phoenix/phoenix.h"
#include "report.hpp"

namespace {

using phx_e2e::Config;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitVerify = 3;
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// Engines in the order they are measured: libphoenix's, then posix.
std::vector<std::string> engine_names() {
  std::vector<std::string> names;
  for (const phxtools::EngineSpec &spec : phxtools::libphoenix_engines()) {
    names.emplace_back(spec.name);
  }
  names.emplace_back("posix");
  return names;
}

struct RawOptions {
  std::vector<std::string> sizes;
  std::vector<std::string> file_sizes;
  std::string chunk;
  std::string device_addr;
  std::string figure = "all";
};

std::vector<std::uint64_t> parse_sizes(const std::vector<std::string> &texts, const char *flag) {
  std::vector<std::uint64_t> sizes;
  for (const std::string &t : texts) {
    const std::uint64_t size = phxtools::parse_size(t);
    if (size == 0 || size % 4096 != 0) {
      throw std::invalid_argument(std::string(flag) + ": '" + t +
                                  "' is not a positive multiple of 4 KiB (O_DIRECT's unit)");
    }
    sizes.push_back(size);
  }
  return sizes;
}

// Turns the raw strings into @p c, with the defaults --quick picks; throws
// std::invalid_argument.
void finish(const RawOptions &raw, const CLI::App &app, Config &c) {
  c.fig8a = raw.figure != "fig8b";
  c.fig8b = raw.figure != "fig8a";
  c.sizes = parse_sizes(raw.sizes, "--sizes");
  if (c.sizes.empty()) {
    for (std::uint64_t s = 4096; s <= kMiB; s *= 2) {
      c.sizes.push_back(s);
    }
  }
  c.file_sizes = parse_sizes(raw.file_sizes, "--file-sizes");
  if (c.file_sizes.empty()) {
    c.file_sizes = c.quick ? std::vector<std::uint64_t>{16 * kMiB, 32 * kMiB, 64 * kMiB}
                           : std::vector<std::uint64_t>{kGiB, 2 * kGiB, 4 * kGiB};
  }
  if (!raw.chunk.empty()) {
    c.chunk = parse_sizes({raw.chunk}, "--chunk").front();
  } else if (c.quick) {
    c.chunk = 4 * kMiB;
  }
  if (c.quick && app.count("--repeat") == 0) {
    c.repeat = 20;
  }
  if (c.quick && app.count("--loops") == 0) {
    c.loops = 3;
  }
  if (!raw.device_addr.empty()) {
    c.device_addr = phxtools::parse_address(raw.device_addr);
    if (!c.engines.empty() &&
        std::find(c.engines.begin(), c.engines.end(), "direct") == c.engines.end()) {
      throw std::invalid_argument("--device-addr is for the direct engine; add -x direct");
    }
  }
}

// The data files: the pattern, so --verify can check every byte.
class DataFiles {
 public:
  explicit DataFiles(const Config &c) : config_(c) {}
  DataFiles(const DataFiles &) = delete;
  DataFiles &operator=(const DataFiles &) = delete;
  DataFiles(DataFiles &&) = delete;
  DataFiles &operator=(DataFiles &&) = delete;
  ~DataFiles() {
    for (const std::filesystem::path &p : created_) {
      std::error_code ignored;
      std::filesystem::remove(p, ignored);
    }
  }

  // Written once per run and shared by the engines.  --reuse-files keeps a
  // file of the right size as it is (and keeps it); otherwise each run
  // writes its own and removes it at exit.
  std::string get(const std::string &name, std::uint64_t length) {
    if (const auto it = ready_.find(name); it != ready_.end()) {
      return it->second;
    }
    std::filesystem::path path = std::filesystem::path(config_.dir) / ("phx-e2e-" + name);
    if (!config_.reuse_files) {
      path += "." + std::to_string(::getpid());
    }
    path += ".dat";
    std::error_code ec;
    if (!config_.reuse_files || std::filesystem::file_size(path, ec) != length || ec) {
      if (!config_.reuse_files) {
        created_.push_back(path);
      }
      phxtools::create_pattern_file(path.string(), length);
    }
    return ready_.emplace(name, path.string()).first->second;
  }

 private:
  const Config &config_;
  std::vector<std::filesystem::path> created_;
  std::map<std::string, std::string> ready_;  // name -> path
};

// Why the engine cannot run here, or nothing; *loader receives it.
std::optional<std::string> open_engine(const Config &c, const std::string &name,
                                       std::unique_ptr<phx_e2e::Loader> *loader) {
  if (name == "posix") {
    *loader = phx_e2e::make_posix_loader(c.device);
    return std::nullopt;
  }
  const phxtools::EngineSpec &spec = *phxtools::find_libphoenix_engine(name);
  const bool own_addresses = name == "direct" && c.device_addr.has_value();
  const phx::Engine engine = spec.engine;
  if (auto why = phxtools::unavailable_reason(spec, c.device, !own_addresses)) {
    return why;
  }
  *loader = phx_e2e::make_libphoenix_loader(spec, engine, c.device,
                                            own_addresses ? c.device_addr : std::nullopt);
  return std::nullopt;
}

int run(const Config &c) {
  phx_e2e::Report report(c);
  DataFiles files(c);
  const bool named = !c.engines.empty();
  std::vector<const char *> figures;
  if (c.fig8a) {
    figures.push_back("fig8a");
  }
  if (c.fig8b) {
    figures.push_back("fig8b");
  }
  unsigned measured = 0;
  bool failed = false;
  bool wrong_bytes = false;
  for (const std::string &name : engine_names()) {
    if (named && std::find(c.engines.begin(), c.engines.end(), name) == c.engines.end()) {
      continue;
    }
    std::unique_ptr<phx_e2e::Loader> loader;
    if (const auto why = open_engine(c, name, &loader)) {
      // An engine nobody asked for is only mentioned.
      std::cerr << "phx-e2e: " << (named ? "not available: " : "skipped: ") << name
                << " engine: " << *why << '\n';
      if (named) {
        for (const char *f : figures) {
          report.unavailable(name, f, *why);
        }
      }
      continue;
    }
    const char *current = figures.front();
    try {
      if (c.fig8a) {
        current = "fig8a";
        const std::uint64_t largest = *std::max_element(c.sizes.begin(), c.sizes.end());
        const std::uint64_t length = std::max(16 * kMiB, 16 * largest);
        for (const phx_e2e::RequestResult &r :
             phx_e2e::measure_requests(c, *loader, files.get("fig8a", length), length)) {
          report.requests(*loader, r);
          wrong_bytes = wrong_bytes || !r.verify.ok();
        }
      }
      if (c.fig8b) {
        current = "fig8b";
        for (const std::uint64_t size : c.file_sizes) {
          const std::string path = files.get("fig8b-" + std::to_string(size), size);
          const phx_e2e::LoadResult r = phx_e2e::measure_load(c, *loader, path, size);
          report.load(*loader, r);
          wrong_bytes = wrong_bytes || !r.verify.ok();
        }
      }
      ++measured;
    } catch (const std::system_error &e) {
      // An engine that opened but cannot serve this file (cuFile refusing
      // the filesystem) is as unavailable as one that did not open.
      if (e.code().value() == ENOTSUP) {
        std::cerr << "phx-e2e: not available: " << name << " engine: " << e.what() << '\n';
        report.unavailable(name, current, e.what());
      } else {
        std::cerr << "phx-e2e: failed: " << name << " engine: " << e.what() << '\n';
        failed = true;
      }
    } catch (const std::exception &e) {
      std::cerr << "phx-e2e: failed: " << name << " engine: " << e.what() << '\n';
      failed = true;
    }
  }
  std::cout.flush();
  if (!std::cout || failed) {
    return kExitFailed;
  }
  if (wrong_bytes) {
    return kExitVerify;
  }
  return measured > 0 ? 0 : kExitUsage;
}

}  // namespace

int main(int argc, char **argv) {
  Config c;
  RawOptions raw;
  CLI::App app{
      "The paper's end-to-end experiments per engine.  fig8a: a request that registers its "
      "buffer, reads and deregisters, against the read alone on a buffer registered before "
      "(4 KiB to 1 MiB).  fig8b: loading a whole file (1, 2, 4 GiB) into device memory: driver "
      "open, file open, buffer allocation and registration, the read, and the way back, each "
      "step timed.  Both report the software share of the time.  Engines: phoenix "
      "(libphoenix direct), compat, gds (cuFile), host (registered host memory), posix (pread "
      "into host memory, then cudaMemcpy when there is a GPU).",
      "phx-e2e"};
  app.footer(
      "Sizes take K, M, G (powers of 1024) and must be multiples of 4K.\n"
      "Exit status: 0 measured; 1 a step of some engine failed; 2 bad arguments, or no engine "
      "asked for can run here (each such engine prints a record with status \"unavailable\" "
      "and the reason); 3 --verify found wrong bytes.\n"
      "Examples:\n"
      "  phx-e2e --quick -x host -x posix --verify\n"
      "  phx-e2e -x compat -x gds -x posix --json > e2e.jsonl\n"
      "  phx-e2e -x direct -d 1 --device-addr 0xc000000 --quick --dir /mnt   (the rig)\n"
      "Records and what the paper found: docs/phx-e2e.md");
  app.set_version_flag("--version", std::string("phx-e2e ") + PHOENIX_VERSION_STRING +
                                        " (libphoenix " + phxfs_version() + ")");
  const std::vector<std::string> names = engine_names();
  app.add_option("-x,--engine", c.engines,
                 "Engines to measure (repeatable; default: every one that runs here)")
      ->transform(phxtools::engine_option(names));
  app.add_option("--figure", raw.figure, "Which of the paper's figures: fig8a, fig8b or all")
      ->check(CLI::IsMember({"fig8a", "fig8b", "all"}))
      ->capture_default_str();
  app.add_option("-d,--device", c.device, "Device id: phxfs device and CUDA GPU")
      ->check(CLI::Range(0, 63))
      ->capture_default_str();
  app.add_option("-S,--sizes", raw.sizes,
                 "fig8a request sizes (repeatable; default 4K, 8K, ... 1M)");
  app.add_option("-r,--repeat", c.repeat,
                 "fig8a requests per size and kind (default 100; 20 with --quick)")
      ->check(CLI::Range(1U, 1000000U));
  app.add_option("-w,--warmup", c.warmup, "fig8a unmeasured requests per size and kind first")
      ->check(CLI::Range(0U, 1000000U))
      ->capture_default_str();
  app.add_option("-F,--file-sizes", raw.file_sizes,
                 "fig8b file sizes (repeatable; default 1G, 2G, 4G; 16M, 32M, 64M with --quick)");
  app.add_option("-l,--loops", c.loops, "fig8b loads per file size (default 10; 3 with --quick)")
      ->check(CLI::Range(1U, 100000U));
  app.add_option("-c,--chunk", raw.chunk, "fig8b bytes per read (default 16M; 4M with --quick)");
  app.add_option("-t,--threads", c.threads, "fig8b reader threads, each taking the next chunk")
      ->check(CLI::Range(1U, 1024U))
      ->capture_default_str();
  app.add_option("--device-addr", raw.device_addr,
                 "direct engine: register device addresses from ADDR on (0x hex, decimal or a "
                 "size such as 192M) instead of allocating GPU memory: for phxfs providers whose "
                 "device addresses are not CUDA's, such as the rig's PCI BAR (BAR byte offsets)")
      ->type_name("ADDR");
  app.add_option("--dir", c.dir, "Directory for the data files (on the storage under test)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_flag("--reuse-files", c.reuse_files,
               "Keep the data files (phx-e2e-*.dat in --dir) and use ones already there with "
               "the right size as they are");
  app.add_flag("--quick", c.quick, "Small defaults, for a run of a minute or so");
  app.add_flag("--verify", c.verify,
               "Check every byte read against the pattern the files were written with");
  app.add_flag("--json", c.json, "One JSON record per line on stdout (the summary goes to stderr)");
  app.add_flag("--quiet", c.quiet, "No human summary");
  try {
    app.parse(argc, argv);
    finish(raw, app, c);
  } catch (const CLI::ParseError &e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  } catch (const std::invalid_argument &e) {
    std::cerr << "phx-e2e: error: " << e.what() << "\nRun with --help for more information.\n";
    return kExitUsage;
  }
  try {
    return run(c);
  } catch (const std::exception &e) {
    std::cerr << "phx-e2e: failed: " << e.what() << '\n';
    return kExitFailed;
  }
}
