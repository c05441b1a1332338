// SPDX-License-Identifier: MIT
// JSON parsing for safetensors headers and indexes that refuses a key given
// twice in one object: JSON leaves a repeat to the reader, nlohmann keeps the
// last, and other tools keep the first or refuse, so a header or weight_map
// naming a tensor twice would load different tensors in different tools.
#ifndef PHOENIX_LIB_SAFETENSORS_STRICT_JSON_HPP
#define PHOENIX_LIB_SAFETENSORS_STRICT_JSON_HPP

#include <istream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace phx::detail {

/// The parsed document and, when some object holds a key twice, the first
/// such key (empty otherwise).  Throws nlohmann::json::parse_error on bad JSON.
struct StrictJson {
  nlohmann::json value;
  std::string repeated_key;
};

[[nodiscard]] StrictJson parse_strict_json(std::string_view text);
[[nodiscard]] StrictJson parse_strict_json(std::istream &in);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_SAFETENSORS_STRICT_JSON_HPP
