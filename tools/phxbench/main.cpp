// SPDX-License-Identifier: MIT
// phxbench: the paper's micro-benchmark (its gdsio-style tool), with engines
// by name, one JSON record per run and verified data.
//
// Exit status: 0 the run completed (and --verify found every byte right);
// 1 the run failed (an I/O error, ...); 2 bad arguments, or an engine or
// mode this build, machine or file cannot run (the message says which);
// 3 --verify found wrong bytes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "common/cli.hpp"
#include "common/json_record.hpp"
#include "common/pattern_file.hpp"
#include "common/units.hpp"
#include "engine.hpp"
#include "options.hpp"
#include "phoenix/config.h"
#include "phoenix/phoenix.h"
#include "report.hpp"
#include "runner.hpp"

namespace {

using phxbench::Options;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitVerify = 3;
constexpr unsigned kMaxThreads = 4096;
constexpr unsigned kMaxDepth = 32768;  // phx::IoQueue's limit

// Command-line text that needs parsing beyond CLI11's types.
struct RawOptions {
  std::string io_size = "4K";
  std::string length;
  std::string total;
  std::string duration;
  std::string warmup;
  std::string mode = "sync";
  std::string io = "read";
  std::string pattern = "seq";
  std::string device_addr;
};

std::string engine_help() {
  std::string text = "Engine:";
  for (const phxbench::EngineEntry &e : phxbench::engine_table()) {
    text += "\n  " + std::string(e.name) + ": " + std::string(e.summary);
  }
  return text;
}

// Turns the raw strings into Options; throws std::invalid_argument.
void finish_options(const RawOptions &raw, Options &o) {
  o.io_size = phxtools::parse_size(raw.io_size);
  if (o.io_size == 0) {
    throw std::invalid_argument("--io-size must be positive");
  }
  if (!raw.length.empty()) {
    o.length = phxtools::parse_size(raw.length);
  }
  if (!raw.total.empty()) {
    o.total_bytes = phxtools::parse_size(raw.total);
  }
  if (!raw.duration.empty()) {
    o.duration_s = phxtools::parse_seconds(raw.duration);
    if (*o.duration_s <= 0) {
      throw std::invalid_argument("--duration must be positive");
    }
  }
  if (!raw.warmup.empty()) {
    // A unit of time (or none) is seconds; a size unit is bytes.
    const char last = raw.warmup.back();
    if (last == 's' || (last >= '0' && last <= '9') || raw.warmup.ends_with("min")) {
      o.warmup_s = phxtools::parse_seconds(raw.warmup);
    } else {
      o.warmup_bytes = phxtools::parse_size(raw.warmup);
    }
  }
  o.mode = raw.mode == "sync"    ? phxbench::Mode::sync
           : raw.mode == "async" ? phxbench::Mode::async
           : raw.mode == "batch" ? phxbench::Mode::batch
                                 : phxbench::Mode::stream;
  o.io = raw.io == "read" ? phxbench::IoDir::read : phxbench::IoDir::write;
  o.pattern = raw.pattern == "seq" ? phxbench::Pattern::seq : phxbench::Pattern::rand;
  if (o.mode == phxbench::Mode::sync && o.depth != 1) {
    throw std::invalid_argument(
        "sync mode runs one request at a time per thread; --depth applies "
        "to async, batch and stream");
  }
  if (!raw.device_addr.empty()) {
    if (o.engine != "direct") {
      throw std::invalid_argument("--device-addr is for the direct engine (-x direct) only");
    }
    o.device_addr = phxtools::parse_address(raw.device_addr);
  }
  if (o.create && o.length == 0) {
    throw std::invalid_argument("--create needs --length (the size to create)");
  }
}

int run(const Options &o) {
  phxbench::RunContext context;
  context.started_at = phxbench::utc_now();
  if (o.create) {
    phxtools::create_pattern_file(o.file, o.length);
  }
  const phxbench::EngineEntry *entry = phxbench::find_engine(o.engine);
  const std::unique_ptr<phxbench::Engine> engine = entry->make(o);
  context.engine = engine->info();

  std::optional<phx::File> file;
  try {
    file.emplace(o.file, o.io == phxbench::IoDir::read ? O_RDONLY : O_RDWR, 0644,
                 o.direct ? phx::DirectIo::required : phx::DirectIo::off);
  } catch (const std::system_error &e) {
    if (o.direct && e.code().value() == EINVAL) {
      throw phxbench::Unavailable(std::string(e.what()) +
                                  " (O_DIRECT is the default; --no-direct uses the page cache)");
    }
    throw;
  }
  struct stat st {};
  context.file_kind = ::fstat(file->fd(), &st) == 0 && S_ISBLK(st.st_mode) ? "block" : "file";
  const std::uint64_t size = file->size();
  context.length = o.length == 0 ? size : o.length;
  if (context.length > size) {
    throw std::invalid_argument(o.file + " holds " + std::to_string(size) + " bytes; --length " +
                                std::to_string(context.length) +
                                " asks for more (--create makes it)");
  }
  context.direct_io = file->direct_io();
  context.offset_alignment = file->offset_alignment();

  const phxbench::RunResult result = phxbench::run_benchmark(o, *engine, *file, context.length);
  phxtools::RecordWriter records(o.json);
  if (o.json) {
    records.write(phxbench::make_record(o, context, result));
  }
  if (!o.quiet) {
    phxbench::print_summary(records.human(), o, context, result);
  }
  std::cout.flush();
  if (!std::cout) {
    return kExitFailed;
  }
  return result.verify.ran && !result.verify.ok ? kExitVerify : 0;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  RawOptions raw;
  std::vector<std::string> engine_names;
  for (const phxbench::EngineEntry &e : phxbench::engine_table()) {
    engine_names.emplace_back(e.name);
  }
  CLI::App app{
      "Measures file I/O bandwidth, IOPS and latency between storage and GPU (or host) "
      "memory through Phoenix and its baselines; prints one JSON record per run "
      "(--json) and a gdsio-style summary.\n\n" +
          engine_help(),
      "phxbench"};
  app.footer(
      "Sizes take K, M, G, T (powers of 1024); times take s, ms, min.\n"
      "Exit status: 0 the run completed (and --verify found every byte right); 1 the run "
      "failed; 2 bad arguments, or an engine or mode this build, machine or file cannot run; "
      "3 --verify found wrong bytes.\n"
      "Examples:\n"
      "  phxbench -f /data/f -l 1G --create --verify -x host\n"
      "  phxbench -f /data/f -x direct -m async -q 16 -s 64K --json\n"
      "  phxbench -f /data/f -x compat -a rand -s 4K -t 32 --duration 10 --warmup 2s\n"
      "  phxbench -f /mnt/f -x direct -d 1 --device-addr 0xc000000 --verify   (the rig)\n"
      "Fields of the JSON record and the paper's experiments: docs/phxbench.md");
  app.set_version_flag("--version", std::string("phxbench ") + PHOENIX_VERSION_STRING +
                                        " (libphoenix " + phxfs_version() + ")");
  app.add_option("-f,--file", o.file, "File or raw block device to read or write")->required();
  app.add_option("-x,--engine", o.engine,
                 "Engine by name (see above; the old names phoenix and gds still work)")
      ->transform(phxtools::engine_option(engine_names))
      ->capture_default_str();
  app.add_option("-m,--mode", raw.mode,
                 "sync: one request at a time per thread; async: io_uring with --depth requests "
                 "in flight, refilled as each completes; batch: --depth requests submitted and "
                 "reaped together; stream: --depth stream-ordered requests on a CUDA stream, "
                 "then a stream synchronise")
      ->check(CLI::IsMember({"sync", "async", "batch", "stream"}))
      ->capture_default_str();
  app.add_option("-i,--io", raw.io, "Direction: read or write")
      ->check(CLI::IsMember({"read", "write"}))
      ->capture_default_str();
  app.add_option("-a,--pattern", raw.pattern,
                 "Access pattern: seq (each thread walks its own slice of the file) or rand "
                 "(uniform over the file, aligned to the I/O size)")
      ->check(CLI::IsMember({"seq", "rand"}))
      ->capture_default_str();
  app.add_option("-s,--io-size", raw.io_size,
                 "Bytes per request (suffixes K, M, G: powers of 1024)")
      ->capture_default_str();
  app.add_option("-l,--length", raw.length,
                 "Bytes of the file to use, from offset 0 (default: the file's size; required "
                 "with --create)");
  app.add_option("-t,--threads", o.threads, "Worker threads, each with its own buffers")
      ->check(CLI::Range(1U, kMaxThreads))
      ->capture_default_str();
  app.add_option("-q,--depth", o.depth,
                 "Requests in flight per thread (async) or per batch (batch, stream)")
      ->check(CLI::Range(1U, kMaxDepth))
      ->capture_default_str();
  app.add_option("-d,--device", o.device, "Device id: phxfs device and CUDA GPU")
      ->check(CLI::Range(0, 63))
      ->capture_default_str();
  app.add_option("--device-addr", raw.device_addr,
                 "direct engine: register device addresses from ADDR on (0x hex, decimal or a "
                 "size such as 192M) instead of allocating GPU memory; each thread takes the "
                 "next 2 MiB-aligned range.  For phxfs providers whose device addresses are not "
                 "CUDA's, such as the rig's PCI BAR (addresses are BAR byte offsets)")
      ->type_name("ADDR");
  app.add_option("--duration", raw.duration,
                 "Run for this long (seconds; suffixes s, ms, min) instead of one pass");
  app.add_option("--total", raw.total,
                 "Transfer this many bytes in all (default: one pass over --length)");
  app.add_option("--warmup", raw.warmup,
                 "Unmeasured warm-up first: a time (10, 2s, 500ms) or a size (64M)");
  app.add_flag("--create", o.create,
               "Create or overwrite the file with the verification pattern, --length bytes");
  app.add_flag("--verify", o.verify,
               "Check every byte read against the pattern; writes write the pattern and are read "
               "back after the run");
  app.add_flag("--direct,!--no-direct", o.direct,
               "O_DIRECT (default), or the page cache with --no-direct");
  app.add_option("--seed", o.seed, "Seed of the random offsets")->capture_default_str();
  app.add_flag("--json", o.json, "Print the JSON record on stdout (the summary goes to stderr)");
  app.add_flag("--quiet", o.quiet, "No human summary");
  try {
    app.parse(argc, argv);
    finish_options(raw, o);
  } catch (const CLI::ParseError &e) {
    // --help and --version arrive here too, with exit code 0.
    return app.exit(e) == 0 ? 0 : kExitUsage;
  } catch (const std::invalid_argument &e) {
    std::cerr << "phxbench: error: " << e.what() << "\nRun with --help for more information.\n";
    return kExitUsage;
  }

  try {
    return run(o);
  } catch (const phxbench::Unavailable &e) {
    std::cerr << "phxbench: not available: " << e.what() << '\n';
    return kExitUsage;
  } catch (const std::invalid_argument &e) {
    std::cerr << "phxbench: error: " << e.what() << '\n';
    return kExitUsage;
  } catch (const std::system_error &e) {
    // An engine that opened but cannot serve this file (cuFile refusing a
    // filesystem) is as unavailable as one that did not open.
    const bool unsupported = e.code().value() == ENOTSUP;
    std::cerr << "phxbench: " << (unsupported ? "not available: " : "failed: ") << e.what() << '\n';
    return unsupported ? kExitUsage : kExitFailed;
  } catch (const std::exception &e) {
    std::cerr << "phxbench: failed: " << e.what() << '\n';
    return kExitFailed;
  }
}
