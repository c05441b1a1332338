// SPDX-License-Identifier: MIT
// CLI11 pieces the tools share (header only: the tools link CLI11).
#ifndef PHX_TOOLS_CLI_HPP
#define PHX_TOOLS_CLI_HPP

#include <CLI/CLI.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine_names.hpp"

namespace phxtools {

/// Takes an engine name among @p known (canonical names), old spellings
/// included, and leaves the canonical one in the option.
[[nodiscard]] inline CLI::Validator engine_option(std::vector<std::string> known) {
  return {[known = std::move(known)](std::string &name) -> std::string {
            try {
              name = parse_engine_name(name, known);
            } catch (const std::invalid_argument &e) {
              return e.what();
            }
            return {};
          },
          "ENGINE"};
}

}  // namespace phxtools

#endif  // PHX_TOOLS_CLI_HPP
