// SPDX-License-Identifier: MIT
#include "report.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "common/json_record.hpp"
#include "phoenix/phoenix.h"

namespace phxbench {
namespace {

using nlohmann::ordered_json;

using phxtools::optional_json;

double per_second(double amount, double seconds) {
  return seconds > 0 ? amount / seconds : 0.0;
}

double us(std::uint64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

ordered_json machine_json() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) {
    host[0] = '\0';
  }
  utsname uts{};
  const bool have_uts = ::uname(&uts) == 0;
  return {{"hostname", host.data()},
          {"kernel", have_uts ? uts.release : ""},
          {"arch", have_uts ? uts.machine : ""},
          {"cpus", ::sysconf(_SC_NPROCESSORS_ONLN)}};
}

}  // namespace

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  (void)::gmtime_r(&now, &tm);
  std::ostringstream out;
  out << std::put_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  return out.str();
}

ordered_json make_record(const Options &o, const RunContext &c, const RunResult &r) {
  ordered_json config = {
      {"file", o.file},
      {"engine", o.engine},
      {"mode", to_string(o.mode)},
      {"io", to_string(o.io)},
      {"pattern", to_string(o.pattern)},
      {"io_size", o.io_size},
      {"length", c.length},
      {"threads", o.threads},
      {"depth", o.depth},
      {"device", o.device},
      {"device_addr", optional_json(o.device_addr)},
      {"duration_s", optional_json(o.duration_s)},
      {"total_bytes", optional_json(o.total_bytes)},
      {"warmup_s", optional_json(o.warmup_s)},
      {"warmup_bytes", optional_json(o.warmup_bytes)},
      {"create", o.create},
      {"verify", o.verify},
      {"direct", o.direct},
      {"seed", o.seed},
  };
  const Histogram &h = r.latency;
  ordered_json latency = {
      {"of", r.latency_of},
      {"count", h.count()},
      {"min", us(h.min())},
      {"mean", h.mean() / 1e3},
      {"p50", us(h.percentile(0.5))},
      {"p95", us(h.percentile(0.95))},
      {"p99", us(h.percentile(0.99))},
      {"p99_9", us(h.percentile(0.999))},
      {"max", us(h.max())},
      {"max_relative_error", Histogram::kMaxRelativeError},
  };
  const auto bytes = static_cast<double>(r.bytes);
  ordered_json result = {
      {"bytes", r.bytes},
      {"ops", r.ops},
      {"seconds", r.seconds},
      {"bandwidth_gbps", per_second(bytes, r.seconds) / 1e9},
      {"bandwidth_gibps", per_second(bytes, r.seconds) / 1073741824.0},
      {"iops", per_second(static_cast<double>(r.ops), r.seconds)},
      {"latency_us", latency},
      {"cpu",
       {{"user_s", r.cpu_user_s},
        {"sys_s", r.cpu_sys_s},
        {"cores_busy", per_second(r.cpu_user_s + r.cpu_sys_s, r.seconds)}}},
      {"warmup", {{"bytes", r.warmup_bytes}, {"seconds", r.warmup_seconds}}},
      {"enqueue_seconds",
       o.mode == Mode::stream ? ordered_json(r.enqueue_seconds) : ordered_json(nullptr)},
  };
  ordered_json verify = {
      {"ran", r.verify.ran},
      {"ok", r.verify.ran ? ordered_json(r.verify.ok) : ordered_json(nullptr)},
      {"bytes_checked", r.verify.bytes_checked},
      {"mismatched_ios", r.verify.mismatched_ios},
      {"first_mismatch_offset", optional_json(r.verify.first_mismatch_offset)},
  };
  // "version" the tool's, "library_version" libphoenix's: one string in
  // this statically linked build.
  ordered_json record = phxtools::record_head("phxbench", {.schema = "phxbench/1"});
  record.update(ordered_json{
      {"library_version", phxfs_version()},
      {"started_at", c.started_at},
      {"config", config},
      {"engine",
       {{"name", o.engine},
        {"library_engine", c.engine.library_engine},
        {"memory", c.engine.memory},
        {"detail", c.engine.detail}}},
      {"target",
       {{"path", o.file},
        {"kind", c.file_kind},
        {"direct_io", c.direct_io},
        {"offset_alignment", c.offset_alignment}}},
      {"result", result},
      {"verify", verify},
      {"machine", machine_json()},
  });
  return record;
}

void print_summary(std::ostream &out, const Options &o, const RunContext &c, const RunResult &r) {
  const auto bytes = static_cast<double>(r.bytes);
  const Histogram &h = r.latency;
  std::ostringstream line;
  line << std::fixed << std::setprecision(3);
  line << "IoType: " << (o.io == IoDir::read ? "READ" : "WRITE") << " XferType: " << o.engine
       << " (" << c.engine.memory << " memory) Mode: " << to_string(o.mode)
       << " Pattern: " << to_string(o.pattern) << " Threads: " << o.threads << " Depth: " << o.depth
       << " DataSetSize: " << r.bytes / 1024 << "/" << c.length / 1024
       << "(KiB) IOSize: " << o.io_size / 1024.0
       << "(KiB) Throughput: " << per_second(bytes, r.seconds) / 1073741824.0 << " GiB/sec ("
       << per_second(bytes, r.seconds) / 1e9 << " GB/s), IOPS: " << std::setprecision(0)
       << per_second(static_cast<double>(r.ops), r.seconds) << std::setprecision(1)
       << ", Avg_Latency: " << h.mean() / 1e3 << " usecs, p99: " << us(h.percentile(0.99))
       << " usecs (per " << r.latency_of << ") ops: " << r.ops << " total_time "
       << std::setprecision(3) << r.seconds << " secs";
  if (r.verify.ran) {
    line << " Verify: " << (r.verify.ok ? "ok" : "FAILED") << " (" << r.verify.bytes_checked
         << " bytes checked";
    if (r.verify.first_mismatch_offset) {
      line << ", first mismatch at offset " << *r.verify.first_mismatch_offset;
    }
    line << ")";
  }
  out << line.str() << '\n';
}

}  // namespace phxbench
