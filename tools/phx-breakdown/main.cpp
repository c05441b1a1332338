// SPDX-License-Identifier: MIT
// phx-breakdown: where the time goes outside the transfer.  Per engine, the
// steps of the paper's Table 1 for a 64 KiB sync read (device open, file
// open, buffer registration, first and second read, deregistration, file
// close, device close), and registration/deregistration against buffer
// size (its Fig 3).  One JSON record per engine, step and size.
//
// Exit status: 0 measured; 1 a step of some engine failed (the others are
// still measured); 2 bad arguments, or no engine asked for can run here.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "common/cli.hpp"
#include "common/engine_spec.hpp"
#include "common/json_record.hpp"
#include "common/pattern_file.hpp"
#include "common/timing.hpp"
#include "common/units.hpp"
#include "phoenix/config.h"
#include "phoenix/phoenix.hpp"

namespace {

using nlohmann::ordered_json;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr std::size_t kReadSize = std::size_t{64} * 1024;  // the paper's Table 1 read

using phxtools::Clock;
using phxtools::EngineSpec;
using phxtools::us_since;

struct Options {
  std::vector<std::string> engines;
  int device = 0;
  std::vector<std::string> sizes;
  bool large = false;
  unsigned repeat = 10;
  std::string file;
  std::optional<std::uint64_t> device_addr;  ///< phoenix: device addresses, not cudaMalloc
  bool json = false;
  bool quiet = false;
};

class Recorder {
 public:
  explicit Recorder(const Options &options) : options_(options), out_(options.json) {}

  void add(const EngineSpec &spec, const std::string &step, std::uint64_t size,
           std::vector<double> samples) {
    const phxtools::SampleSummary stats = phxtools::summarize(std::move(samples));
    ordered_json rec = phxtools::record_head("phx-breakdown", {.schema = "phx-breakdown/1"});
    rec.update(ordered_json{
        {"engine", spec.name},
        {"library_engine", spec.name},
        {"memory", spec.gpu_memory ? "gpu" : "host"},
        {"step", step},
        {"size", size},
        {"repeat", stats.count},
    });
    rec.update(phxtools::summary_json(stats, "_us"));
    rec["device"] = options_.device;
    out_.write(rec);
    if (!options_.quiet) {
      std::ostream &human = out_.human();
      human << std::left << std::setw(8) << spec.name << std::setw(16) << step << std::right
            << std::setw(12) << size << "  mean " << std::fixed << std::setprecision(1)
            << std::setw(12) << stats.mean << " us  p50 " << std::setw(12) << stats.p50
            << " us  first " << std::setw(12) << stats.first << " us\n";
    }
  }

 private:
  const Options &options_;
  phxtools::RecordWriter out_;
};

// direct registers --device-addr's addresses when given; the others their own memory.
std::optional<std::uint64_t> addresses(const Options &o, const EngineSpec &spec) {
  return std::string_view(spec.name) == "direct" ? o.device_addr : std::nullopt;
}

// Table 1's steps, each repeated: the first repeat shows one-time costs
// (a driver opened once per process, a file handle set up on first use).
void table1(const Options &o, const EngineSpec &spec, phx::Engine engine, Recorder &rec) {
  std::vector<double> open_us, file_open_us, reg_us, first_read_us, read_us, dereg_us,
      file_close_us, close_us;
  const phxtools::Memory memory(spec, o.device, kReadSize, addresses(o, spec));
  for (unsigned i = 0; i < o.repeat; ++i) {
    Clock::time_point t0 = Clock::now();
    std::optional<phx::Device> dev(phx::Device::open(o.device, engine));
    open_us.push_back(us_since(t0));

    t0 = Clock::now();
    std::optional<phx::File> file(std::in_place, o.file, O_RDONLY);
    file_open_us.push_back(us_since(t0));

    t0 = Clock::now();
    phx::Registration reg = dev->register_memory(memory.data(), kReadSize);
    reg_us.push_back(us_since(t0));

    for (std::vector<double> *samples : {&first_read_us, &read_us}) {
      t0 = Clock::now();
      const std::size_t n = file->read(reg, 0, kReadSize, 0);
      samples->push_back(us_since(t0));
      if (n != kReadSize) {
        throw std::runtime_error("short read of " + o.file);
      }
    }

    t0 = Clock::now();
    reg.release();
    dereg_us.push_back(us_since(t0));

    t0 = Clock::now();
    file.reset();
    file_close_us.push_back(us_since(t0));

    t0 = Clock::now();
    dev.reset();
    close_us.push_back(us_since(t0));
  }
  rec.add(spec, "device_open", 0, open_us);
  rec.add(spec, "file_open", 0, file_open_us);
  rec.add(spec, "buf_register", kReadSize, reg_us);
  rec.add(spec, "first_read", kReadSize, first_read_us);
  rec.add(spec, "read", kReadSize, read_us);
  rec.add(spec, "buf_deregister", kReadSize, dereg_us);
  rec.add(spec, "file_close", 0, file_close_us);
  rec.add(spec, "device_close", 0, close_us);
}

// Fig 3: registration and deregistration against buffer size, on one open
// device, each size's memory allocated once outside the timing.
void registration_sweep(const Options &o, const EngineSpec &spec, phx::Engine engine,
                        const std::vector<std::uint64_t> &sizes, Recorder &rec) {
  phx::Device dev = phx::Device::open(o.device, engine);
  for (const std::uint64_t size : sizes) {
    const phxtools::Memory memory(spec, o.device, size, addresses(o, spec));
    std::vector<double> reg_us;
    std::vector<double> dereg_us;
    for (unsigned i = 0; i < o.repeat; ++i) {
      Clock::time_point t0 = Clock::now();
      phx::Registration reg = dev.register_memory(memory.data(), size);
      reg_us.push_back(us_since(t0));
      t0 = Clock::now();
      reg.release();
      dereg_us.push_back(us_since(t0));
    }
    rec.add(spec, "register", size, reg_us);
    rec.add(spec, "deregister", size, dereg_us);
  }
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  std::vector<std::string> names;
  names.reserve(phxtools::libphoenix_engines().size());
  for (const EngineSpec &e : phxtools::libphoenix_engines()) {
    names.emplace_back(e.name);
  }
  CLI::App app{
      "Times the steps around an I/O per engine: device open/close, file open/close, "
      "buffer registration/deregistration (64 KiB, and against size), first and "
      "later 64 KiB reads.  Engines that cannot run here are skipped unless named.",
      "phx-breakdown"};
  app.set_version_flag("--version", std::string("phx-breakdown ") + PHOENIX_VERSION_STRING);
  app.add_option("-x,--engine", o.engines,
                 "Engines to measure (repeatable; default: every one "
                 "that runs here)")
      ->transform(phxtools::engine_option(names));
  app.add_option("-d,--device", o.device, "Device id: phxfs device and CUDA GPU")
      ->check(CLI::Range(0, 63))
      ->capture_default_str();
  app.add_option("-S,--sizes", o.sizes,
                 "Registration sizes (default 4K, 8K, ... 16M: the paper's Fig 3)");
  app.add_flag("--large", o.large, "Also register 1G and 4G (no 16 MiB or 1 GiB limit)");
  app.add_option("-r,--repeat", o.repeat, "Repeats per measurement (the paper's: 10)")
      ->check(CLI::Range(1U, 100000U))
      ->capture_default_str();
  app.add_option("-f,--file", o.file,
                 "File to read 64 KiB from (default: a scratch file in /var/tmp)");
  std::string device_addr;
  app.add_option("--device-addr", device_addr,
                 "direct engine: register device addresses from ADDR on (0x hex, decimal or a "
                 "size such as 192M) instead of GPU memory, for providers whose device addresses "
                 "are not CUDA's, such as the rig's PCI BAR (BAR byte offsets)")
      ->type_name("ADDR");
  app.add_flag("--json", o.json, "One JSON record per line on stdout (the table goes to stderr)");
  app.add_flag("--quiet", o.quiet, "No table");
  std::vector<std::uint64_t> sizes;
  try {
    app.parse(argc, argv);
    if (!device_addr.empty()) {
      o.device_addr = phxtools::parse_address(device_addr);
    }
    for (const std::string &s : o.sizes) {
      sizes.push_back(phxtools::parse_size(s));
      if (sizes.back() == 0) {
        throw std::invalid_argument("--sizes: sizes must be positive");
      }
    }
  } catch (const CLI::ParseError &e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  } catch (const std::invalid_argument &e) {
    std::cerr << "phx-breakdown: error: " << e.what() << '\n';
    return kExitUsage;
  }
  if (sizes.empty()) {
    for (std::uint64_t s = 4096; s <= (std::uint64_t{16} << 20); s *= 2) {
      sizes.push_back(s);
    }
  }
  if (o.large) {
    sizes.push_back(std::uint64_t{1} << 30);
    sizes.push_back(std::uint64_t{4} << 30);
  }

  std::optional<std::filesystem::path> scratch;
  try {
    if (o.file.empty()) {
      scratch = std::filesystem::path("/var/tmp") /
                ("phx-breakdown-" + std::to_string(::getpid()) + ".dat");
      o.file = scratch->string();
      phxtools::create_pattern_file(o.file, kReadSize);
    }
    Recorder rec(o);
    const bool named = !o.engines.empty();
    unsigned measured = 0;
    bool failed = false;
    for (const EngineSpec &spec : phxtools::libphoenix_engines()) {
      if (named && std::find(o.engines.begin(), o.engines.end(), spec.name) == o.engines.end()) {
        continue;
      }
      const phx::Engine engine = spec.engine;
      if (const auto why =
              phxtools::unavailable_reason(spec, o.device, !addresses(o, spec).has_value())) {
        std::cerr << "phx-breakdown: not available: " << spec.name << " engine: " << *why << '\n';
        continue;
      }
      // The sweep needs no file, so an engine that cannot read this file
      // (cuFile refusing its filesystem) still reports registration.
      try {
        registration_sweep(o, spec, engine, sizes, rec);
        table1(o, spec, engine, rec);
        ++measured;
      } catch (const std::system_error &e) {
        const bool unsupported = e.code().value() == ENOTSUP;
        std::cerr << "phx-breakdown: " << (unsupported ? "not available: " : "failed: ")
                  << spec.name << " engine: " << e.what() << '\n';
        failed = failed || !unsupported;
      } catch (const std::exception &e) {
        std::cerr << "phx-breakdown: failed: " << spec.name << " engine: " << e.what() << '\n';
        failed = true;
      }
    }
    if (scratch) {
      std::filesystem::remove(*scratch);
    }
    if (failed) {
      return kExitFailed;
    }
    return measured > 0 ? 0 : kExitUsage;
  } catch (const std::exception &e) {
    if (scratch) {
      std::error_code ignored;
      std::filesystem::remove(*scratch, ignored);
    }
    std::cerr << "phx-breakdown: failed: " << e.what() << '\n';
    return kExitFailed;
  }
}
