// SPDX-License-Identifier: MIT
// phx-cufile-bench: what cuFile's calls cost through whichever
// libcufile.so.0 the loader finds (libphoenix-cufile or NVIDIA's), and the
// shim's per-call overhead over the same libphoenix call (issue 27, item 3).
// One JSON record per line:
//   library        the file loaded, Phoenix's or NVIDIA's, cuFileGetVersion
//   driver_open    the process's first cuFileDriverOpen (CUDA already up)
//   device_open    phx::Device::open of the same engine, for comparison
//   buf_register   cuFileBufRegister/Deregister per size, and libphoenix's
//                  register_memory on the same memory (api "phx")
//   call           cuFileRead, or phx::File::read through the tool's own
//                  libphoenix, of one size from a warm file into registered
//                  memory: per-call median and p99, interleaved rounds, data
//                  checked
//   call_overhead  the two calls' difference per size
//   driver_close   cuFileDriverClose
// A failing call is a record with status "error" naming the call and the
// cuFile error (NVIDIA's cuFile refusing a file system is a result).
//
// Exit status: 0 measured (error records included); 1 a data check found
// wrong bytes; 2 bad arguments, or no GPU, CUDA driver or libcufile here.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/engine_names.hpp"
#include "common/fd.hpp"
#include "common/host_buffer.hpp"
#include "common/json_record.hpp"
#include "common/pattern.hpp"
#include "common/pattern_file.hpp"
#include "common/timing.hpp"
#include "common/unavailable.hpp"
#include "common/units.hpp"
#include "cuda_driver.hpp"
#include "cufile_api.hpp"
#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"

namespace {

using nlohmann::ordered_json;
using phxtools::Clock;
using phxtools::us_since;

constexpr int kExitWrongData = 1;
constexpr int kExitUnavailable = 2;
constexpr std::size_t kGoalBytes = 4096;  // the goal: under 2 us at 4 KiB
constexpr double kGoalUs = 2.0;
constexpr unsigned kWarmupCalls = 32;

struct Options {
  std::string library = "libcufile.so.0";
  std::vector<std::string> steps{"driver_open", "buf_register", "call_overhead"};
  std::vector<std::string> register_sizes{"4K", "64K", "1M", "16M", "256M", "1G"};
  std::vector<std::string> io_sizes{"4K", "64K"};
  std::string file;
  bool create = false;
  std::string file_size = "64M";
  unsigned repeat = 10;
  unsigned iterations = 2000;
  unsigned rounds = 5;
  int device = 0;
  int phx_device = -1;
  std::string engine = "auto";
  bool direct = false;
};

class Records {
 public:
  explicit Records(const Options &o) : options_(o), out_(true) {}
  void set_library(std::string path, std::string implementation) {
    path_ = std::move(path);
    implementation_ = std::move(implementation);
  }
  // One line, flushed: a crash later keeps what was measured.
  void emit(const std::string &kind, const std::string &api, const ordered_json &body) {
    ordered_json rec = phxtools::record_head("phx-cufile-bench", {.schema = "phx-cufile-bench/1"});
    rec.update(ordered_json{{"kind", kind},
                            {"api", api},
                            {"library", path_},
                            {"implementation", api == "phx" ? "libphoenix" : implementation_},
                            {"engine_asked", options_.engine},
                            {"device", options_.device}});
    if (!body.contains("status")) {
      rec["status"] = "ok";
    }
    rec.update(body);
    out_.write(rec);
  }

 private:
  const Options &options_;
  phxtools::RecordWriter out_;
  std::string path_;
  std::string implementation_;
};

ordered_json cufile_error(const char *call, phxcufile::Status st) {
  return {{"status", "error"},
          {"error",
           {{"call", call},
            {"code", st.err},
            {"cu_err", st.cu_err},
            {"name", phxcufile::error_name(st.err)}}}};
}

ordered_json exception_error(const char *call, const std::exception &e) {
  return {{"status", "error"}, {"error", {{"call", call}, {"message", e.what()}}}};
}

std::vector<std::uint64_t> sizes(const std::vector<std::string> &texts) {
  std::vector<std::uint64_t> out;
  out.reserve(texts.size());
  for (const auto &t : texts) {
    out.push_back(phxtools::parse_size(t));
  }
  return out;
}

bool wants(const Options &o, const std::string &step) {
  return std::find(o.steps.begin(), o.steps.end(), step) != o.steps.end();
}

/// libphoenix's side: a device opened the way the shim opens one.
struct PhxSide {
  std::optional<phx::Device> device;
};

void buf_register(const Options &o, phxcufile::Library &lib, phxcufile::CudaDriver &cuda,
                  PhxSide &phx, Records &out) {
  for (const std::uint64_t size : sizes(o.register_sizes)) {
    std::unique_ptr<phxcufile::GpuBuffer> buf;
    try {
      buf = std::make_unique<phxcufile::GpuBuffer>(cuda, size);
    } catch (const std::exception &e) {
      ordered_json body = exception_error("cuMemAlloc", e);
      body["size"] = size;
      out.emit("buf_register", "cufile", body);
      continue;
    }
    std::vector<double> reg[2];
    std::vector<double> dereg[2];
    std::optional<ordered_json> failed[2];
    // cuFile and libphoenix take turns, each going first every other time.
    for (unsigned r = 0; r < o.repeat; ++r) {
      for (int turn = 0; turn < 2; ++turn) {
        const int api = (static_cast<int>(r) + turn) % 2;  // 0 cufile, 1 phx
        if (failed[api]) {
          continue;
        }
        if (api == 0) {
          auto t = Clock::now();
          const phxcufile::Status st = lib.buf_register(buf->data(), size, 0);
          const double reg_us = us_since(t);
          if (st.err != 0) {
            failed[0] = cufile_error("cuFileBufRegister", st);
            continue;
          }
          t = Clock::now();
          const phxcufile::Status dst = lib.buf_deregister(buf->data());
          const double dereg_us = us_since(t);
          if (dst.err != 0) {
            failed[0] = cufile_error("cuFileBufDeregister", dst);
            continue;
          }
          reg[0].push_back(reg_us);
          dereg[0].push_back(dereg_us);
        } else if (phx.device) {
          try {
            auto t = Clock::now();
            std::optional<phx::Registration> registration(
                phx.device->register_memory(buf->data(), size));
            const double reg_us = us_since(t);
            t = Clock::now();
            registration.reset();
            dereg[1].push_back(us_since(t));
            reg[1].push_back(reg_us);
          } catch (const std::exception &e) {
            failed[1] = exception_error("phx::Device::register_memory", e);
          }
        }
      }
    }
    for (int api = 0; api < 2; ++api) {
      const char *name = api == 0 ? "cufile" : "phx";
      if (api == 1 && !phx.device) {
        continue;
      }
      ordered_json body = failed[api] ? *failed[api] : ordered_json::object();
      body["size"] = size;
      if (!reg[api].empty()) {
        body["register"] = phxtools::latency_json(reg[api], "_us");
        body["deregister"] = phxtools::latency_json(dereg[api], "_us");
      }
      out.emit("buf_register", name, body);
    }
  }
}

/// Reads the whole file once, so the timed calls find it in the page cache.
void warm(int fd, std::uint64_t length) {
  phxtools::HostBuffer chunk(std::size_t{1} << 20);
  for (std::uint64_t off = 0; off < length; off += chunk.size()) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), length - off));
    phxtools::pread_all(fd, chunk.span().first(n), off, "warm-up read");
  }
}

struct CallResult {
  std::vector<double> samples;
  std::optional<ordered_json> error;
  ordered_json verify = {{"ran", false}};
};

// Returns whether a data check found wrong bytes.
bool call_overhead(const Options &o, phxcufile::Library &lib, phxcufile::CudaDriver &cuda,
                   PhxSide &phx, Records &out) {
  if (o.file.empty()) {
    out.emit("call_overhead", "cufile", {{"status", "unavailable"}, {"reason", "no --file given"}});
    return false;
  }
  const std::uint64_t asked = phxtools::parse_size(o.file_size);
  if (o.create) {
    phxtools::create_pattern_file(o.file, asked);
  }
  const int flags = O_RDONLY | (o.direct ? O_DIRECT : 0);
  phxtools::UniqueFd fd = phxtools::open_fd(o.file, flags);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    throw std::system_error(errno, std::generic_category(), "fstat " + o.file);
  }
  const auto length = static_cast<std::uint64_t>(st.st_size);
  {
    const phxtools::UniqueFd buffered = phxtools::open_fd(o.file, O_RDONLY);
    warm(buffered.get(), length);
  }
  phxcufile::Descr descr{};
  descr.type = phxcufile::kHandleTypeOpaqueFd;
  descr.handle.fd = fd.get();
  phxcufile::Handle fh = nullptr;
  std::optional<ordered_json> handle_error;
  const phxcufile::Status hs = lib.handle_register(&fh, &descr);
  if (hs.err != 0) {
    handle_error = cufile_error("cuFileHandleRegister", hs);
  }
  std::optional<phx::File> file;
  std::optional<ordered_json> file_error;
  if (phx.device) {
    try {
      file.emplace(o.file, O_RDONLY, 0644, o.direct ? phx::DirectIo::required : phx::DirectIo::off);
    } catch (const std::exception &e) {
      file_error = exception_error("phx::File", e);
    }
  }
  bool wrong = false;
  for (const std::uint64_t size : sizes(o.io_sizes)) {
    if (size == 0 || size > length) {
      out.emit("call", "cufile",
               {{"status", "error"},
                {"size", size},
                {"error",
                 {{"call", "setup"},
                  {"message", size == 0 ? "size 0" : "file shorter than the size"}}}});
      continue;
    }
    const std::uint64_t slots = (length - size) / size + 1;
    const auto offset = [&](std::uint64_t i) { return (i % slots) * size; };
    phxcufile::GpuBuffer buf(cuda, size);
    CallResult res[2];
    res[0].error = handle_error;
    if (!res[0].error) {
      const phxcufile::Status bs = lib.buf_register(buf.data(), size, 0);
      if (bs.err != 0) {
        res[0].error = cufile_error("cuFileBufRegister", bs);
      }
    }
    std::optional<phx::Registration> reg;
    res[1].error = file_error;
    if (!phx.device) {
      res[1].error = ordered_json{
          {"status", "error"}, {"error", {{"call", "phx::Device::open"}, {"message", "not open"}}}};
    }
    if (!res[1].error) {
      try {
        reg.emplace(phx.device->register_memory(buf.data(), size));
      } catch (const std::exception &e) {
        res[1].error = exception_error("phx::Device::register_memory", e);
      }
    }
    // One call of either API; false (and the error kept) when it failed.
    const std::function<bool(int, std::uint64_t, bool)> call = [&](int api, std::uint64_t off,
                                                                   bool timed) {
      const auto t = Clock::now();
      if (api == 0) {
        const ssize_t n = lib.read(fh, buf.data(), size, static_cast<off_t>(off), 0);
        const double us = us_since(t);
        if (n != static_cast<ssize_t>(size)) {
          res[0].error =
              ordered_json{{"status", "error"},
                           {"error",
                            {{"call", "cuFileRead"},
                             {"returned", n},
                             {"name", n == -1 ? std::system_category().message(errno)
                                      : n < 0 ? phxcufile::error_name(static_cast<int>(-n))
                                              : std::string("short read")}}}};
          return false;
        }
        if (timed) {
          res[0].samples.push_back(us);
        }
        return true;
      }
      try {
        const std::size_t n = file->read(*reg, 0, size, off);
        const double us = us_since(t);
        if (n != size) {
          res[1].error = ordered_json{{"status", "error"},
                                      {"error", {{"call", "phx::File::read"}, {"returned", n}}}};
          return false;
        }
        if (timed) {
          res[1].samples.push_back(us);
        }
      } catch (const std::exception &e) {
        res[1].error = exception_error("phx::File::read", e);
        return false;
      }
      return true;
    };
    for (int api = 0; api < 2; ++api) {
      for (unsigned i = 0; i < kWarmupCalls && !res[api].error; ++i) {
        (void)call(api, offset(i), false);
      }
    }
    // Interleaved rounds: each API in turn, the first one alternating, so a
    // drift of the machine lands on both.
    const unsigned rounds = std::max(1U, o.rounds);
    const unsigned per_round = std::max(1U, o.iterations / rounds);
    std::uint64_t next = 0;
    for (unsigned r = 0; r < rounds; ++r) {
      for (int turn = 0; turn < 2; ++turn) {
        const int api = (static_cast<int>(r) + turn) % 2;
        std::uint64_t i = next;
        for (unsigned k = 0; k < per_round && !res[api].error; ++k, ++i) {
          (void)call(api, offset(i), true);
        }
      }
      next += per_round;
    }
    // The data check: a cleared buffer, one read from the middle, compared
    // with the pattern from the host.
    for (int api = 0; api < 2; ++api) {
      if (res[api].error) {
        continue;
      }
      const std::uint64_t off = offset(slots / 2);
      phxtools::HostBuffer host(size);
      cuda.to_device(buf.data(), host.data(), size);  // HostBuffer starts zeroed
      if (!call(api, off, false)) {
        continue;
      }
      cuda.to_host(host.data(), buf.data(), size);
      const auto bad = phxtools::find_mismatch(host.span(), off);
      res[api].verify = {{"ran", true}, {"ok", !bad}, {"file_offset", off}};
      if (bad) {
        res[api].verify["first_mismatch"] = *bad;
        wrong = true;
      }
    }
    if (!res[0].error) {
      (void)lib.buf_deregister(buf.data());
    }
    reg.reset();
    for (int api = 0; api < 2; ++api) {
      ordered_json body = res[api].error ? *res[api].error : ordered_json::object();
      body["size"] = size;
      body["file"] = o.file;
      body["direct"] = o.direct;
      if (api == 1 && phx.device) {
        body["library_engine"] = std::string(phx::to_string(phx.device->engine()));
      }
      if (!res[api].samples.empty()) {
        body["call"] = phxtools::latency_json(res[api].samples, "_us");
      }
      body["verify"] = res[api].verify;
      out.emit("call", api == 0 ? "cufile" : "phx", body);
    }
    ordered_json diff = {{"size", size},
                         {"goal_us", size == kGoalBytes ? ordered_json(kGoalUs) : ordered_json()}};
    const bool both =
        !res[0].error && !res[1].error && !res[0].samples.empty() && !res[1].samples.empty();
    if (both) {
      const auto a = phxtools::summarize(res[0].samples);
      const auto b = phxtools::summarize(res[1].samples);
      diff["cufile_p50_us"] = a.p50;
      diff["phx_p50_us"] = b.p50;
      diff["overhead_p50_us"] = a.p50 - b.p50;
      diff["overhead_p99_us"] = a.p99 - b.p99;
      diff["within_goal"] =
          size == kGoalBytes ? ordered_json(a.p50 - b.p50 < kGoalUs) : ordered_json();
    } else {
      diff["status"] = "error";
      diff["error"] = {{"message", "one of the two calls did not run (see its call record)"}};
    }
    out.emit("call_overhead", "cufile", diff);
  }
  if (!handle_error) {
    lib.handle_deregister(fh);
  }
  return wrong;
}

int run(const Options &o) {
  Records out(o);
  std::unique_ptr<phxcufile::CudaDriver> cuda;
  try {
    cuda = std::make_unique<phxcufile::CudaDriver>(o.device);
  } catch (const std::exception &e) {
    out.emit("library", "cufile", {{"status", "unavailable"}, {"reason", e.what()}});
    std::cerr << "phx-cufile-bench: " << e.what() << '\n';
    return kExitUnavailable;
  }
  // The shim reads PHX_ENGINE when it opens its device; libphoenix here
  // gets the engine named.
  const std::optional<phx::Engine> engine = phxtools::library_engine(o.engine);
  if (o.engine != "auto") {
    // The shim in this process chooses its engine from PHX_ENGINE, read once
    // at its first call; nothing of the library's has run yet.
    ::setenv("PHX_ENGINE", o.engine.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  }
  std::unique_ptr<phxcufile::Library> lib;
  try {
    lib = std::make_unique<phxcufile::Library>(o.library);
  } catch (const std::exception &e) {
    out.emit("library", "cufile", {{"status", "unavailable"}, {"reason", e.what()}});
    std::cerr << "phx-cufile-bench: " << e.what() << '\n';
    return kExitUnavailable;
  }
  std::error_code ec;
  const auto real = std::filesystem::canonical(lib->path(), ec);
  out.set_library(lib->path(), lib->implementation());
  int version = 0;
  const phxcufile::Status vs = lib->get_version(&version);
  out.emit("library", "cufile",
           {{"real_path", ec ? lib->path() : real.string()},
            {"cufile_version", vs.err == 0 ? ordered_json(version) : ordered_json()},
            {"load_us", lib->load_us()},
            {"cuda_driver", cuda->path()},
            {"cuda_init_us", cuda->init_us()},
            {"phoenix_version", phxfs_version()}});

  auto t = Clock::now();
  const phxcufile::Status os = lib->driver_open();
  const double open_us = us_since(t);
  ordered_json open_body =
      os.err != 0 ? cufile_error("cuFileDriverOpen", os) : ordered_json::object();
  open_body["open_us"] = open_us;
  if (wants(o, "driver_open")) {
    out.emit("driver_open", "cufile", open_body);
  }

  PhxSide phx;
  t = Clock::now();
  try {
    phx.device.emplace(phx::Device::open(o.phx_device >= 0 ? o.phx_device : o.device,
                                         engine.value_or(phx::Engine::automatic)));
    if (wants(o, "driver_open")) {
      out.emit("device_open", "phx",
               {{"open_us", us_since(t)},
                {"library_engine", std::string(phx::to_string(phx.device->engine()))}});
    }
  } catch (const std::exception &e) {
    ordered_json body = exception_error("phx::Device::open", e);
    body["open_us"] = us_since(t);
    out.emit("device_open", "phx", body);
  }

  bool wrong = false;
  if (wants(o, "buf_register")) {
    buf_register(o, *lib, *cuda, phx, out);
  }
  if (wants(o, "call_overhead")) {
    try {
      wrong = call_overhead(o, *lib, *cuda, phx, out);
    } catch (const std::exception &e) {
      out.emit("call_overhead", "cufile", exception_error("setup", e));
    }
  }
  phx.device.reset();
  if (os.err == 0) {
    t = Clock::now();
    const phxcufile::Status cs = lib->driver_close();
    ordered_json body =
        cs.err != 0 ? cufile_error("cuFileDriverClose", cs) : ordered_json::object();
    body["close_us"] = us_since(t);
    out.emit("driver_close", "cufile", body);
  }
  return wrong ? kExitWrongData : 0;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  CLI::App app{
      "phx-cufile-bench: cuFile's driver open, buffer registration and per-call cost through "
      "the libcufile.so.0 loaded (Phoenix's shim or NVIDIA's), beside libphoenix's own calls. "
      "JSON records on stdout."};
  app.add_option("--cufile-library", o.library,
                 "libcufile to dlopen: a path, or a name the loader looks up "
                 "(default libcufile.so.0: LD_LIBRARY_PATH, then the system's)");
  app.add_option("--steps", o.steps, "driver_open, buf_register, call_overhead")
      ->delimiter(',')
      ->check(CLI::IsMember({"driver_open", "buf_register", "call_overhead"}));
  app.add_option("--register-sizes", o.register_sizes, "buffer sizes to register (4K..1G)")
      ->delimiter(',');
  app.add_option("--io-sizes", o.io_sizes, "read sizes for call_overhead")->delimiter(',');
  app.add_option("--file", o.file, "file to read (call_overhead)");
  app.add_flag("--create", o.create, "write --file with the verification pattern first");
  app.add_option("--file-size", o.file_size, "size --create writes");
  app.add_option("--repeat", o.repeat, "registrations per size and API")
      ->check(CLI::PositiveNumber);
  app.add_option("--iterations", o.iterations, "timed reads per size and API")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "interleaved rounds the reads are split into")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", o.device, "CUDA device ordinal for the buffers");
  app.add_option("--phx-device", o.phx_device,
                 "libphoenix device id to compare with (default: --device; the shim numbers "
                 "GPUs in PCI order)");
  app.add_option("--engine", o.engine,
                 "libphoenix engine on both sides: auto (the shim's choice) or a name, "
                 "exported as PHX_ENGINE before the library loads");
  app.add_flag("--direct", o.direct, "open the file with O_DIRECT (default: buffered, warm)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!phxtools::library_engine(o.engine)) {
      throw std::invalid_argument("--engine: unknown engine " + o.engine);
    }
    (void)sizes(o.register_sizes);
    (void)sizes(o.io_sizes);
    (void)phxtools::parse_size(o.file_size);
  } catch (const std::exception &e) {
    std::cerr << "phx-cufile-bench: " << e.what() << '\n';
    return kExitUnavailable;
  }
  try {
    return run(o);
  } catch (const phxtools::Unavailable &e) {
    std::cerr << "phx-cufile-bench: " << e.what() << '\n';
    return kExitUnavailable;
  }
}
