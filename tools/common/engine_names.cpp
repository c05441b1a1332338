// SPDX-License-Identifier: MIT
#include "engine_names.hpp"

#include <algorithm>
#include <stdexcept>
#include <system_error>

namespace phxtools {

std::optional<phx::Engine> library_engine(std::string_view name) {
  try {
    return phx::parse_engine(name);
  } catch (const std::system_error &) {
    return std::nullopt;
  }
}

std::string canonical_engine(std::string_view name) {
  if (const auto engine = library_engine(name)) {
    return std::string(phx::to_string(*engine));
  }
  return std::string(name);
}

std::string parse_engine_name(std::string_view name, const std::vector<std::string> &known) {
  std::string canonical = canonical_engine(name);
  if (std::find(known.begin(), known.end(), canonical) == known.end()) {
    throw std::invalid_argument("unknown engine '" + std::string(name) + "' (expected " +
                                join_names(known) + ")");
  }
  return canonical;
}

std::string join_names(const std::vector<std::string> &names) {
  std::string out;
  std::size_t i = 0;
  for (const std::string &name : names) {
    out += i == 0 ? "" : i + 1 == names.size() ? " or " : ", ";
    out += name;
    ++i;
  }
  return out;
}

}  // namespace phxtools
