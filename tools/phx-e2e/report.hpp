// SPDX-License-Identifier: MIT
// phx-e2e's output: one JSON record per engine and size ("phx-e2e/1",
// fields in docs/phx-e2e.md and docs/phx-e2e-schema.json) and a line of
// human summary for each.
#ifndef PHX_E2E_REPORT_HPP
#define PHX_E2E_REPORT_HPP

#include <string>

#include "common/json_record.hpp"
#include "e2e_config.hpp"
#include "experiments.hpp"
#include "loader.hpp"

namespace phx_e2e {

class Report {
 public:
  explicit Report(const Config &config);

  void requests(const Loader &loader, const RequestResult &result);
  void load(const Loader &loader, const LoadResult &result);
  /// The record of an engine that cannot run here, saying why.
  void unavailable(const std::string &engine, const std::string &figure, const std::string &reason);

 private:
  const Config &config_;
  phxtools::RecordWriter out_;
};

}  // namespace phx_e2e

#endif  // PHX_E2E_REPORT_HPP
