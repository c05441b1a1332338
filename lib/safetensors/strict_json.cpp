// SPDX-License-Identifier: MIT
#include "safetensors/strict_json.hpp"

#include <set>
#include <utility>
#include <vector>

namespace phx::detail {
namespace {

using nlohmann::json;

// Keys seen in each object still open, innermost last.
class RepeatFinder {
 public:
  explicit RepeatFinder(std::string &repeated) : repeated_(repeated) {}

  bool operator()(int /*depth*/, json::parse_event_t event, json &parsed) {
    if (event == json::parse_event_t::object_start) {
      open_.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_.pop_back();
    } else if (event == json::parse_event_t::key && repeated_.empty()) {
      const auto &key = parsed.get_ref<const std::string &>();
      if (!open_.back().insert(key).second) {
        repeated_ = key;
      }
    }
    return true;
  }

 private:
  std::string &repeated_;
  std::vector<std::set<std::string>> open_;
};

template <typename Input>
StrictJson parse(Input &&input) {
  StrictJson out;
  RepeatFinder finder(out.repeated_key);
  out.value = json::parse(std::forward<Input>(input), json::parser_callback_t(finder));
  return out;
}

}  // namespace

StrictJson parse_strict_json(std::string_view text) {
  return parse(text);
}

StrictJson parse_strict_json(std::istream &in) {
  return parse(in);
}

}  // namespace phx::detail
