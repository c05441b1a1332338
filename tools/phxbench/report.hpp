// SPDX-License-Identifier: MIT
// phxbench's output: one JSON record per run (docs/phxbench-schema.json) and
// a one-line human summary in gdsio's style.
#ifndef PHXBENCH_REPORT_HPP
#define PHXBENCH_REPORT_HPP

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "engine.hpp"
#include "options.hpp"
#include "runner.hpp"

namespace phxbench {

/// What the run was done on, beyond the options.
struct RunContext {
  EngineInfo engine;
  std::string file_kind;  ///< "file" or "block"
  std::uint64_t length = 0;
  bool direct_io = false;
  std::uint64_t offset_alignment = 1;
  std::string started_at;  ///< UTC, ISO 8601
};

[[nodiscard]] nlohmann::ordered_json make_record(const Options &options, const RunContext &context,
                                                 const RunResult &result);

void print_summary(std::ostream &out, const Options &options, const RunContext &context,
                   const RunResult &result);

/// The current time, UTC, as 2026-11-29T20:45:00Z.
[[nodiscard]] std::string utc_now();

}  // namespace phxbench

#endif  // PHXBENCH_REPORT_HPP
