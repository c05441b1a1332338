// SPDX-License-Identifier: MIT
#include "report.hpp"

#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "common/json_record.hpp"
#include "common/timing.hpp"

namespace phx_e2e {
namespace {

using nlohmann::ordered_json;

double mean(const std::vector<double> &samples) {
  return samples.empty() ? 0.0 : phxtools::summarize(samples).mean;
}

// The part of @p total that is not @p transfer.
double share(double total, double transfer) {
  return total > 0 ? (total - transfer) / total : 0.0;
}

ordered_json config_json(const Config &c) {
  return {{"device", c.device},
          {"sizes", c.sizes},
          {"file_sizes", c.file_sizes},
          {"repeat", c.repeat},
          {"warmup", c.warmup},
          {"loops", c.loops},
          {"chunk", c.chunk},
          {"threads", c.threads},
          {"device_addr", phxtools::optional_json(c.device_addr)},
          {"dir", c.dir},
          {"quick", c.quick},
          {"verify", c.verify}};
}

ordered_json verify_json(const Verification &v) {
  return {{"ran", v.enabled()},
          {"ok", v.enabled() ? ordered_json(v.ok()) : ordered_json(nullptr)},
          {"bytes_checked", v.bytes_checked()},
          {"mismatched_reads", v.mismatched_reads()},
          {"first_mismatch_offset", phxtools::optional_json(v.first_mismatch_offset())}};
}

// docs/phx-e2e-schema.json: schema and version, no "tool".
ordered_json head(const Config &c, const char *figure, const std::string &engine) {
  ordered_json rec = phxtools::record_head("phx-e2e", {.schema = "phx-e2e/1", .tool = false});
  rec.update(ordered_json{
      {"figure", figure}, {"status", "ok"}, {"engine", engine}, {"config", config_json(c)}});
  return rec;
}

}  // namespace

Report::Report(const Config &config) : config_(config), out_(config.json) {}

void Report::requests(const Loader &loader, const RequestResult &r) {
  ordered_json rec = head(config_, "fig8a", loader.name());
  const double total = mean(r.total_us);
  const double pure = mean(r.pure_read_us);
  const double reg = mean(r.register_us) + mean(r.deregister_us);
  rec.update(ordered_json{
      {"library_engine", loader.library_engine()},
      {"memory", loader.memory()},
      {"size", r.size},
      {"repeat", r.total_us.size()},
      {"registers", r.registers},
      {"total_us", phxtools::latency_json(r.total_us)},
      {"pure_read_us", phxtools::latency_json(r.pure_read_us)},
      {"register_us", r.registers ? phxtools::latency_json(r.register_us) : ordered_json(nullptr)},
      {"read_us", phxtools::latency_json(r.read_us)},
      {"deregister_us",
       r.registers ? phxtools::latency_json(r.deregister_us) : ordered_json(nullptr)},
      {"software_share", share(total, pure)},
      {"software_share_p50",
       share(phxtools::summarize(r.total_us).p50, phxtools::summarize(r.pure_read_us).p50)},
      {"registration_vs_read", r.registers && pure > 0 ? ordered_json(reg / pure) : nullptr},
      {"verify", verify_json(r.verify)},
  });
  out_.write(rec);
  if (!config_.quiet) {
    out_.human() << "fig8a " << std::left << std::setw(8) << loader.name() << std::right
                 << std::setw(10) << r.size << " B  register+read+deregister " << std::fixed
                 << std::setprecision(1) << std::setw(9) << total << " us  read alone "
                 << std::setw(9) << pure << " us  software " << std::setw(5)
                 << 100 * share(total, pure) << " %"
                 << (r.verify.enabled() ? (r.verify.ok() ? "  verified" : "  VERIFY FAILED") : "")
                 << '\n';
  }
}

void Report::load(const Loader &loader, const LoadResult &r) {
  ordered_json rec = head(config_, "fig8b", loader.name());
  ordered_json steps = ordered_json::object();
  double read = 0;
  for (const LoadResult::Step &s : r.steps) {
    steps[s.name] = phxtools::latency_json(s.us);
    if (s.name == "read") {
      read = mean(s.us);
    }
  }
  const double total = mean(r.total_us);
  rec.update(ordered_json{
      {"library_engine", loader.library_engine()},
      {"memory", loader.memory()},
      {"file_size", r.file_size},
      {"loops", r.total_us.size()},
      {"threads", config_.threads},
      {"chunk", config_.chunk},
      {"steps_us", steps},
      {"total_us", phxtools::latency_json(r.total_us)},
      {"software_share", share(total, read)},
      {"read_gbps", read > 0 ? static_cast<double>(r.file_size) / read / 1e3 : 0.0},
      {"end_to_end_gbps", total > 0 ? static_cast<double>(r.file_size) / total / 1e3 : 0.0},
      {"verify", verify_json(r.verify)},
  });
  out_.write(rec);
  if (!config_.quiet) {
    std::ostream &out = out_.human();
    out << "fig8b " << std::left << std::setw(8) << loader.name() << std::right << std::setw(12)
        << r.file_size << " B  total " << std::fixed << std::setprecision(1) << std::setw(11)
        << total / 1e3 << " ms  read " << std::setw(11) << read / 1e3 << " ms  software "
        << std::setw(5) << 100 * share(total, read) << " %"
        << (r.verify.enabled() ? (r.verify.ok() ? "  verified" : "  VERIFY FAILED") : "") << '\n';
    for (const LoadResult::Step &s : r.steps) {
      if (!s.us.empty() && s.name != "read") {
        out << "      " << std::left << std::setw(18) << s.name << std::right << std::setw(11)
            << mean(s.us) / 1e3 << " ms\n";
      }
    }
  }
}

void Report::unavailable(const std::string &engine, const std::string &figure,
                         const std::string &reason) {
  ordered_json rec = head(config_, figure.c_str(), engine);
  rec["status"] = "unavailable";
  rec["reason"] = reason;
  out_.write(rec);
}

}  // namespace phx_e2e
