// SPDX-License-Identifier: MIT
// phx-load - loads a safetensors checkpoint (file, folder or index) into GPU
// memory through libphoenix, reports how fast, and optionally checks every
// tensor against a plain CPU read.  Exit status: 0 loaded (and verified),
// 1 load failed or a tensor differs, 2 engine unavailable, 64 usage error.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "common/cli.hpp"
#include "common/json_record.hpp"
#include "common/timing.hpp"
#include "phoenix/safetensors.hpp"
#include "progress.hpp"
#include "verify.hpp"

namespace {

namespace st = phx::safetensors;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr int kExitFailed = 1;
constexpr int kExitUnavailable = 2;
constexpr int kExitUsage = 64;

struct Options {
  std::vector<std::string> paths;
  std::string engine = "auto";
  int device = 0;
  std::string device_map;
  std::string cache = "auto";
  std::size_t chunk_size = std::size_t{32} << 20;
  unsigned queue_depth = 8;
  unsigned parallel_files = 4;
  bool pinned = false;
  bool verify = false;
  bool drop_cache = false;
  int repeat = 1;
  bool json = false;
  std::string json_out;
  bool quiet = false;
};

st::CachePolicy parse_cache(const std::string &name) {
  if (name == "direct") {
    return st::CachePolicy::direct;
  }
  if (name == "buffered") {
    return st::CachePolicy::buffered;
  }
  return st::CachePolicy::automatic;
}

// Evicts the files from the page cache so the next load reads the disk.
void drop_cache(const st::Checkpoint &ckpt) {
  for (const st::FileHeader &f : ckpt.files) {
    const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw std::system_error(errno, std::system_category(), "open " + f.path.string());
    }
    (void)::fdatasync(fd);
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    (void)::close(fd);
    if (rc != 0) {
      throw std::system_error(rc, std::system_category(),
                              "posix_fadvise(DONTNEED) " + f.path.string());
    }
  }
}

ordered_json base_record(const Options &opt) {
  ordered_json r = phxtools::record_head("phx-load");
  r.update(ordered_json{{"paths", opt.paths},
                        {"engine_requested", opt.engine},
                        {"device", opt.device},
                        {"device_map", opt.device_map},
                        {"cache", opt.cache},
                        {"chunk_size", opt.chunk_size},
                        {"queue_depth", opt.queue_depth},
                        {"parallel_files", opt.parallel_files},
                        {"pinned", opt.pinned},
                        {"drop_cache", opt.drop_cache}});
  return r;
}

// How each file was read and why (LoadStats::per_file), in checkpoint order.
ordered_json per_file_records(const st::LoadStats &stats) {
  ordered_json files = ordered_json::array();
  for (const st::FileReadStats &fs : stats.per_file) {
    files.push_back(ordered_json{
        {"path", fs.path.string()},
        {"bytes", fs.bytes},
        {"mode", fs.direct ? "direct" : "buffered"},
        {"path_taken", fs.path_taken},
        {"threads", fs.threads},
        {"request_bytes", fs.request_bytes},
        {"depth", fs.depth},
        {"resident", fs.resident < 0 ? ordered_json(nullptr) : ordered_json(fs.resident)},
        {"why", fs.why}});
  }
  return files;
}

ordered_json result_record(const Options &opt, int run, const st::LoadedCheckpoint &loaded,
                           double setup_seconds) {
  const st::LoadStats &s = loaded.stats;
  ordered_json r = base_record(opt);
  ordered_json engines = ordered_json::object();
  for (const auto &[id, engine] : s.engines) {
    engines[std::to_string(id)] = std::string(phx::to_string(engine));
  }
  r.update(ordered_json{
      {"status", "ok"},
      {"run", run},
      {"files", s.files},
      {"files_direct", s.files_direct},
      {"files_streamed", s.files_streamed},
      {"segments", s.segments},
      {"tensors", loaded.tensors.size()},
      {"tensor_bytes", s.tensor_bytes},
      {"bytes_read", s.bytes_read},
      {"seconds", s.seconds},
      {"allocate_seconds", s.allocate_seconds},
      {"read_seconds", s.seconds - s.allocate_seconds},
      {"gbps", s.seconds > 0 ? static_cast<double>(s.tensor_bytes) / s.seconds / 1e9 : 0.0},
      {"setup_seconds", setup_seconds},
      // The process's wall time so far: start-up, CUDA initialisation
      // and warm-up included, which "seconds" (the load alone) leaves out.
      {"process_seconds", phxtools::process_seconds()},
      {"engines", engines},
      {"per_file", per_file_records(s)}});
  return r;
}

std::string fixed(double value, int decimals) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(decimals) << value;
  return text.str();
}

std::string gigabytes(std::uint64_t bytes) {
  return fixed(static_cast<double>(bytes) / 1e9, 3) + " GB";
}

// "device 0: compat, device 1: compat"
std::string engines_text(const st::LoadStats &stats) {
  std::string text;
  for (const auto &[id, engine] : stats.engines) {
    text += (text.empty() ? "" : ", ") + std::string("device ") + std::to_string(id) + ": " +
            std::string(phx::to_string(engine));
  }
  return text;
}

bool engine_unavailable(int err) {
  return err == ENODEV || err == ENOTSUP || err == EPROTO || err == EBUSY || err == EIO;
}

int run(const Options &opt) {
  // Records on stdout with --json, in --json-out's file when given; the
  // human lines on stdout unless it carries records.
  phxtools::RecordWriter report(opt.json, opt.json_out);
  st::LoadOptions lo;
  lo.engine = phx::parse_engine(opt.engine);
  lo.devices = st::DeviceMap::parse(opt.device_map, opt.device);
  lo.cache = parse_cache(opt.cache);
  lo.chunk_size = opt.chunk_size;
  lo.queue_depth = opt.queue_depth;
  lo.parallel_files = opt.parallel_files;
  lo.pinned_host = opt.pinned;

  std::vector<std::filesystem::path> paths(opt.paths.begin(), opt.paths.end());
  const st::Checkpoint ckpt = st::open_checkpoint(paths);
  report.human() << "phx-load: " << ckpt.files.size() << " file(s), " << ckpt.tensor_count()
                 << " tensors, " << gigabytes(ckpt.tensor_bytes()) << "\n";

  const auto setup_start = Clock::now();
  std::optional<st::Loader> loader;
  try {
    loader.emplace(lo);
    loader->warm_up(ckpt);
  } catch (const std::system_error &e) {
    if (!engine_unavailable(e.code().value())) {
      throw;
    }
    ordered_json r = base_record(opt);
    r.update(
        ordered_json{{"status", "unavailable"}, {"errno", e.code().value()}, {"error", e.what()}});
    report.write(r);
    std::cerr << "phx-load: engine unavailable: " << e.what() << "\n";
    return kExitUnavailable;
  }
  const double setup_seconds = std::chrono::duration<double>(Clock::now() - setup_start).count();

  const bool tty = ::isatty(STDERR_FILENO) == 1;
  int status = 0;
  for (int run = 0; run < opt.repeat; ++run) {
    if (opt.drop_cache) {
      drop_cache(ckpt);
    }
    phx::load_tool::Progress progress(stderr, tty, opt.quiet);
    loader->set_progress(
        [&](std::uint64_t done, std::uint64_t total) { progress.update(done, total); });
    std::shared_ptr<st::LoadedCheckpoint> loaded;
    try {
      loaded = loader->load(ckpt);
    } catch (const std::system_error &e) {
      ordered_json r = base_record(opt);
      const bool unavailable = lo.engine == phx::Engine::cufile && e.code().value() == ENOTSUP;
      r.update(ordered_json{{"status", unavailable ? "unavailable" : "error"},
                            {"run", run},
                            {"errno", e.code().value()},
                            {"error", e.what()}});
      report.write(r);
      std::cerr << "phx-load: " << e.what() << "\n";
      return unavailable ? kExitUnavailable : kExitFailed;
    }
    progress.finish(loaded->stats.bytes_read, loaded->stats.bytes_read);
    ordered_json r = result_record(opt, run, *loaded, setup_seconds);
    report.human() << "phx-load: run " << run << ": " << gigabytes(loaded->stats.tensor_bytes)
                   << " in " << fixed(loaded->stats.seconds, 3) << " s, "
                   << fixed(r["gbps"].get<double>(), 2) << " GB/s (" << engines_text(loaded->stats)
                   << "); process wall time so far " << fixed(r["process_seconds"].get<double>(), 3)
                   << " s\n";
    if (opt.verify) {
      const phx::load_tool::VerifyResult v = phx::load_tool::verify(*loaded);
      r["verify"] = {{"tensors", v.tensors},
                     {"bytes", v.bytes},
                     {"ok", v.mismatches.empty()},
                     {"mismatches", v.mismatches},
                     {"seconds", v.seconds}};
      report.human() << "phx-load: verify: " << v.tensors << " tensors, "
                     << (v.mismatches.empty() ? "all equal" : "MISMATCH") << "\n";
      for (const std::string &m : v.mismatches) {
        report.human() << "phx-load:   " << m << "\n";
      }
      if (!v.mismatches.empty()) {
        r["status"] = "mismatch";
        status = kExitFailed;
      }
    }
    report.write(r);
  }
  return status;
}

}  // namespace

int main(int argc, char **argv) {
  Options opt;
  CLI::App app{
      "Loads a safetensors checkpoint (a .safetensors file, a folder, or a "
      "model.safetensors.index.json) into GPU memory with libphoenix.\n"
      "Exit status: 0 loaded (and verified), 1 load failed or a tensor differs, 2 engine "
      "unavailable (a JSON record says why), 64 usage error."};
  app.add_option("paths", opt.paths, "files, folders or indexes")->required();
  app.add_option("--engine", opt.engine,
                 "auto, direct, compat, host or cufile (the old names phoenix and gds still work)")
      ->transform(phxtools::engine_option({"auto", "direct", "compat", "host", "cufile"}))
      ->capture_default_str();
  app.add_option("--device", opt.device, "Phoenix device id for every tensor")
      ->check(CLI::Range(0, 63))
      ->capture_default_str();
  app.add_option("--device-map", opt.device_map,
                 "per-tensor devices: prefix=dev,... (longest dotted prefix wins)");
  app.add_option("--cache", opt.cache,
                 "auto: buffered when the page cache holds the file, else O_DIRECT; direct; "
                 "buffered")
      ->check(CLI::IsMember({"auto", "direct", "buffered"}))
      ->capture_default_str();
  app.add_option("--chunk-size", opt.chunk_size, "bytes per io_uring request (K, M, G)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--queue-depth", opt.queue_depth, "requests in flight per file")
      ->check(CLI::Range(1U, 4096U))
      ->capture_default_str();
  app.add_option("--parallel-files", opt.parallel_files, "files read at the same time")
      ->check(CLI::Range(1U, 256U))
      ->capture_default_str();
  app.add_flag("--pinned", opt.pinned, "host engine: load into pinned host memory");
  app.add_flag("--verify", opt.verify, "compare every tensor with a plain CPU read");
  app.add_flag("--drop-cache", opt.drop_cache,
               "evict the files from the page cache before each run (cold load)");
  app.add_option("--repeat", opt.repeat, "loads in a row")->check(CLI::Range(1, 1000));
  app.add_flag("--json", opt.json, "one JSON record per run on stdout (text on stderr)");
  app.add_option("--json-out", opt.json_out, "also write the JSON records to this file");
  app.add_flag("--quiet", opt.quiet, "no progress output");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  try {
    return run(opt);
  } catch (const std::exception &e) {
    if (opt.json) {
      // Stdout only: the error may be --json-out's file itself.
      ordered_json r = base_record(opt);
      const auto *se = dynamic_cast<const std::system_error *>(&e);
      r.update(ordered_json{{"status", "error"},
                            {"errno", se != nullptr ? se->code().value() : 0},
                            {"error", e.what()}});
      phxtools::RecordWriter(true).write(r);
    }
    std::cerr << "phx-load: " << e.what() << "\n";
    return kExitFailed;
  }
}
