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
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "gpu.hpp"
#include "host_buffer.hpp"
#include "options.hpp"
#include "pattern.hpp"
#include "phoenix/config.h"
#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr std::size_t kReadSize = std::size_t{64} * 1024;  // the paper's Table 1 read

struct EngineSpec {
  const char *name;            // phxbench's name
  const char *library_engine;  // phx::parse_engine's
  bool gpu_memory;
};
constexpr std::array<EngineSpec, 4> kEngines{{
    {"phoenix", "direct", true},
    {"compat", "compat", true},
    {"gds", "cufile", true},
    {"host", "host", false},
}};

struct Options {
  std::vector<std::string> engines;
  int device = 0;
  std::vector<std::string> sizes;
  bool large = false;
  unsigned repeat = 10;
  std::string file;
  bool json = false;
  bool quiet = false;
};

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Memory of the kind the engine registers.
class Memory {
 public:
  Memory(const EngineSpec &spec, int device, std::size_t bytes) {
    if (spec.gpu_memory) {
      gpu_ = std::make_unique<phxbench::gpu::DeviceBuffer>(device, bytes);
    } else {
      host_ = std::make_unique<phxbench::HostBuffer>(bytes);
    }
  }
  [[nodiscard]] void *data() const { return gpu_ ? gpu_->data() : host_->data(); }

 private:
  std::unique_ptr<phxbench::gpu::DeviceBuffer> gpu_;
  std::unique_ptr<phxbench::HostBuffer> host_;
};

class Recorder {
 public:
  explicit Recorder(const Options &options) : options_(options) {}

  void add(const EngineSpec &spec, const std::string &step, std::uint64_t size,
           std::vector<double> samples) {
    const double first = samples.front();
    std::sort(samples.begin(), samples.end());
    double sum = 0;
    for (const double s : samples) {
      sum += s;
    }
    ordered_json rec = {
        {"schema", "phx-breakdown/1"},
        {"engine", spec.name},
        {"library_engine", spec.library_engine},
        {"memory", spec.gpu_memory ? "gpu" : "host"},
        {"step", step},
        {"size", size},
        {"repeat", samples.size()},
        {"first_us", first},
        {"mean_us", sum / static_cast<double>(samples.size())},
        {"min_us", samples.front()},
        {"p50_us", samples[(samples.size() - 1) / 2]},
        {"max_us", samples.back()},
        {"device", options_.device},
        {"version", phxfs_version()},
    };
    if (options_.json) {
      std::cout << rec.dump() << '\n';
    }
    if (!options_.quiet) {
      std::ostream &out = options_.json ? std::cerr : std::cout;
      out << std::left << std::setw(8) << spec.name << std::setw(16) << step << std::right
          << std::setw(12) << size << "  mean " << std::fixed << std::setprecision(1)
          << std::setw(12) << rec["mean_us"].get<double>() << " us  p50 " << std::setw(12)
          << rec["p50_us"].get<double>() << " us  first " << std::setw(12) << first << " us\n";
    }
  }

 private:
  const Options &options_;
};

// Table 1's steps, each repeated: the first repeat shows one-time costs
// (a driver opened once per process, a file handle set up on first use).
void table1(const Options &o, const EngineSpec &spec, phx::Engine engine, Recorder &rec) {
  std::vector<double> open_us, file_open_us, reg_us, first_read_us, read_us, dereg_us,
      file_close_us, close_us;
  const Memory memory(spec, o.device, kReadSize);
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
    const Memory memory(spec, o.device, size);
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

// Why the engine cannot run here, or nothing.
std::optional<std::string> unavailable(const EngineSpec &spec, int device, phx::Engine *engine) {
  try {
    *engine = phx::parse_engine(spec.library_engine);
  } catch (const std::system_error &) {
    return std::string("not in this libphoenix");
  }
  try {
    const phx::Device dev = phx::Device::open(device, *engine);
  } catch (const std::system_error &e) {
    return std::string(e.what());
  }
  if (spec.gpu_memory) {
    const phxbench::gpu::Probe probe = phxbench::gpu::probe(device);
    if (!probe.usable) {
      return "needs GPU memory, but " + probe.reason;
    }
  }
  return std::nullopt;
}

void create_file(const std::string &path, std::size_t bytes) {
  std::vector<std::byte> data(bytes);
  phxbench::fill_pattern(data, 0);
  phx::File file(path, O_RDWR | O_CREAT | O_TRUNC, 0644, phx::DirectIo::off);
  (void)file.write(std::span<const std::byte>(data), 0);
  file.sync();
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  std::vector<std::string> names;
  names.reserve(kEngines.size());
  for (const EngineSpec &e : kEngines) {
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
      ->check(CLI::IsMember(names));
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
  app.add_flag("--json", o.json, "One JSON record per line on stdout (the table goes to stderr)");
  app.add_flag("--quiet", o.quiet, "No table");
  std::vector<std::uint64_t> sizes;
  try {
    app.parse(argc, argv);
    for (const std::string &s : o.sizes) {
      sizes.push_back(phxbench::parse_size(s));
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
      create_file(o.file, kReadSize);
    }
    Recorder rec(o);
    const bool named = !o.engines.empty();
    unsigned measured = 0;
    bool failed = false;
    for (const EngineSpec &spec : kEngines) {
      if (named && std::find(o.engines.begin(), o.engines.end(), spec.name) == o.engines.end()) {
        continue;
      }
      phx::Engine engine = phx::Engine::host;
      if (const auto why = unavailable(spec, o.device, &engine)) {
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
