// SPDX-License-Identifier: MIT
// phx-kvcache: replays a KV-cache block trace (paper Fig 11) into a paged
// pool of blocks with one engine or several, one JSON line per engine.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/engine_names.hpp"
#include "common/json_record.hpp"
#include "common/units.hpp"
#include "engine.hpp"
#include "gpu.hpp"
#include "kv_file.hpp"
#include "phoenix/config.h"
#include "replay.hpp"
#include "trace.hpp"

namespace {

using nlohmann::ordered_json;
using namespace phx::kvcache;

constexpr int kExitFailed = 1;
constexpr int kExitUnavailable = 2;
constexpr int kExitUsage = 64;

struct Options {
  std::string trace;
  std::string block_size = "16K";
  std::string engines = "host";
  std::string file = "phx-kvcache.bin";
  std::string min_file_size = "0";
  std::string device_addr;
  std::string max_request = "0";
  std::size_t pool_blocks = 0;
  std::size_t max_sequences = 0;
  unsigned queue_depth = 0;
  int device = 0;
  bool verify = false;
  bool buffered = false;
  bool no_merge = false;
  bool stats = false;
  std::string label;
};

std::size_t size_option(const std::string &text, const char *what) {
  try {
    return static_cast<std::size_t>(phxtools::parse_size(text));
  } catch (const std::invalid_argument &e) {
    throw CLI::ValidationError(what, e.what());
  }
}

std::vector<std::string> split(const std::string &list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) {
      out.push_back(item);
    }
  }
  return out;
}

ordered_json base_record(const Options &o, const Trace &trace, std::size_t block_size,
                         const std::string &engine) {
  ordered_json r = phxtools::record_head("phx-kvcache");
  r.update(ordered_json{{"trace", trace.name},
                        {"max_sequences", o.max_sequences},
                        {"block_size", block_size},
                        {"engine", engine},
                        {"file", o.file},
                        {"device", o.device},
                        {"cuda_build", PHX_WITH_CUDA != 0}});
  if (!o.label.empty()) {
    r["label"] = o.label;
  }
  return r;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  CLI::App app{"phx-kvcache: replay a KV-cache block trace into a paged pool of blocks"};
  app.add_option("--trace", o.trace, "trace file (Seq/Round lines)")->required();
  app.add_option("--block-size", o.block_size, "bytes per KV block: 8K, 16K, 64K, ...")
      ->capture_default_str();
  app.add_option("--engine", o.engines,
                 "comma-separated: direct (libphoenix with phxfs.ko), compat (GPU without the "
                 "module), cufile (per-block cuFile reads), posix (per-block pread + "
                 "cudaMemcpy), host (pool in host memory), pinned (pool in pinned host memory: "
                 "the ceiling); the old names phoenix and gds still work")
      ->capture_default_str();
  app.add_option("--file", o.file, "the offloaded KV-cache file (created or reused)")
      ->capture_default_str();
  app.add_option("--min-file-size", o.min_file_size,
                 "make the file at least this long, so one file serves several block sizes")
      ->capture_default_str();
  app.add_option("--max-sequences", o.max_sequences,
                 "replay only the trace's first N sequences (0: all): quick runs")
      ->capture_default_str();
  app.add_flag("--verify", o.verify, "check every block loaded against the file's pattern");
  app.add_option("--pool-blocks", o.pool_blocks,
                 "slots in the pool (0: twice the longest sequence)")
      ->capture_default_str();
  app.add_option("--device", o.device, "Phoenix device id (also the CUDA GPU)")
      ->capture_default_str();
  app.add_option("--device-addr", o.device_addr,
                 "direct engine: use device addresses from ADDR (hex or decimal; a BAR offset "
                 "with the pcibar provider) instead of allocating the pool; the other engines "
                 "of the run allocate their own");
  app.add_option("--queue-depth", o.queue_depth, "io_uring entries (0: library default)")
      ->capture_default_str();
  app.add_option("--max-request", o.max_request,
                 "largest merged request (0: library default: 1M direct/host, 256K compat)")
      ->capture_default_str();
  app.add_flag("--no-merge", o.no_merge, "one request per block (to see what merging buys)");
  app.add_flag("--buffered", o.buffered, "page-cache I/O instead of O_DIRECT");
  app.add_option("--label", o.label, "free text copied into every record");
  app.add_flag("--stats", o.stats,
               "print the trace's statistics (sequences, blocks, largest block id, longest "
               "sequence, file bytes needed at --block-size) and exit: no file, no I/O");
  app.footer(
      "Output: one JSON line per engine: sequences, blocks, bytes, requests, io_s (inside the "
      "loads), e2e_s (the replay without the checks), bandwidth_GBps (bytes / io_s, 1e9), "
      "e2e_GBps, latency_ms p50/p95/p99/max per sequence load, verified.\n"
      "Exit status: 0 all ran (and verified), 1 a failure or a mismatch, 2 an engine "
      "unavailable here (its record has status \"unavailable\" and the reason), 64 usage.\n"
      "Example: phx-kvcache --trace gsm100.txt --block-size 16K --engine compat,posix,pinned "
      "--verify --file /scratch/kv.bin");
  std::size_t block_size = 0;
  std::size_t min_file = 0;
  std::size_t max_request = 0;
  std::optional<std::uintptr_t> device_addr;
  try {
    app.parse(argc, argv);
    block_size = size_option(o.block_size, "--block-size");
    min_file = size_option(o.min_file_size, "--min-file-size");
    max_request = size_option(o.max_request, "--max-request");
    if (block_size == 0 || block_size % 4096 != 0) {
      throw CLI::ValidationError("--block-size", "must be a positive multiple of 4096");
    }
    if (!o.device_addr.empty()) {
      device_addr = std::stoull(o.device_addr, nullptr, 0);
    }
  } catch (const CLI::ParseError &e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  } catch (const std::exception &e) {
    std::cerr << "phx-kvcache: " << e.what() << "\n";
    return kExitUsage;
  }

  Trace trace;
  try {
    trace = load_trace(o.trace);
    if (o.max_sequences != 0 && trace.sequences.size() > o.max_sequences) {
      trace.sequences.resize(o.max_sequences);
    }
    const std::uint64_t need = (trace.largest_block() + 1) * block_size;
    if (o.stats) {
      ordered_json r = phxtools::record_head("phx-kvcache");
      r.update(ordered_json{{"trace", trace.name},
                            {"sequences", trace.sequences.size()},
                            {"blocks", trace.block_count()},
                            {"largest_block", trace.largest_block()},
                            {"longest_sequence", trace.longest_sequence()},
                            {"block_size", block_size},
                            {"file_bytes_needed", need}});
      phxtools::RecordWriter(true).write(r);
      return 0;
    }
    ensure_kv_file(o.file, std::max<std::uint64_t>(need, min_file));
  } catch (const std::exception &e) {
    std::cerr << "phx-kvcache: " << e.what() << "\n";
    return kExitFailed;
  }
  EngineSetup setup;
  setup.file = o.file;
  setup.block_size = block_size;
  setup.pool_blocks =
      o.pool_blocks != 0 ? o.pool_blocks : 2 * std::max<std::size_t>(trace.longest_sequence(), 1);
  setup.device = o.device;
  setup.device_address = device_addr;
  setup.direct_io = !o.buffered;
  setup.queue_depth = o.queue_depth;
  setup.max_request = max_request;
  setup.merge = !o.no_merge;

  phxtools::RecordWriter records(true);
  int status = 0;
  for (const std::string &given : split(o.engines)) {
    const std::string name = phxtools::canonical_engine(given);
    ordered_json r = base_record(o, trace, block_size, name);
    r["pool_blocks"] = setup.pool_blocks;
    try {
      auto engine = make_engine(name, setup);
      r["config"] = engine->describe();
      const ReplayStats s = replay(trace, *engine, block_size, setup.pool_blocks, o.verify);
      r["status"] = "ok";
      r["sequences"] = s.sequences;
      r["blocks"] = s.blocks;
      r["bytes"] = s.bytes;
      r["requests"] = s.requests;
      r["io_s"] = s.io_seconds;
      r["e2e_s"] = s.e2e_seconds;
      r["bandwidth_GBps"] =
          s.io_seconds > 0 ? static_cast<double>(s.bytes) / s.io_seconds / 1e9 : 0.0;
      r["e2e_GBps"] = s.e2e_seconds > 0 ? static_cast<double>(s.bytes) / s.e2e_seconds / 1e9 : 0.0;
      r["latency_ms"] = {{"p50", quantile(s.latencies, 0.50) * 1e3},
                         {"p95", quantile(s.latencies, 0.95) * 1e3},
                         {"p99", quantile(s.latencies, 0.99) * 1e3},
                         {"max", quantile(s.latencies, 1.0) * 1e3}};
      if (o.verify) {
        r["verified"] = s.mismatches == 0;
        r["blocks_checked"] = s.blocks_checked;
        r["mismatches"] = s.mismatches;
        if (s.mismatches != 0) {
          r["first_mismatch"] = s.first_mismatch;
          status = kExitFailed;
        }
      } else {
        r["verified"] = nullptr;
      }
    } catch (const Unavailable &e) {
      r["status"] = "unavailable";
      r["error"] = e.what();
      if (status == 0) {
        status = kExitUnavailable;
      }
    } catch (const std::invalid_argument &e) {
      std::cerr << "phx-kvcache: " << e.what() << "\n";
      return kExitUsage;
    } catch (const std::exception &e) {
      r["status"] = "failed";
      r["error"] = e.what();
      status = kExitFailed;
    }
    records.write(r);
  }
  return status;
}
