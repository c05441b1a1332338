// SPDX-License-Identifier: MIT
#include "core/config.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace phx::detail {

std::optional<std::size_t> parse_size(std::string_view text) {
  std::size_t value = 0;
  const char *first = text.data();
  const char *last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || ptr == first) {
    return std::nullopt;
  }
  std::string_view suffix(ptr, static_cast<std::size_t>(last - ptr));
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B" || suffix == "b") {
    shift = 0;
  } else if (suffix == "K" || suffix == "k" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "m" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "g" || suffix == "GiB") {
    shift = 30;
  } else {
    return std::nullopt;
  }
  if (shift != 0 && value > (SIZE_MAX >> shift)) {
    return std::nullopt;
  }
  return value << shift;
}

std::optional<std::string_view> env_string(const char *name) {
  // Read-only use of the environment; the library never calls setenv.
  const char *value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  if (value == nullptr || *value == '\0') {
    return std::nullopt;
  }
  return std::string_view(value);
}

std::size_t env_size(const char *name, std::size_t fallback, std::size_t min, std::size_t max) {
  auto text = env_string(name);
  if (!text) {
    return fallback;
  }
  auto value = parse_size(*text);
  if (!value || *value < min || *value > max) {
    throw_errno(EINVAL, std::string(name) + "=" + std::string(*text) +
                            ": expected a size between " + std::to_string(min) + " and " +
                            std::to_string(max) + " bytes (suffixes K, M, G)");
  }
  return *value;
}

std::size_t env_count(const char *name, std::size_t fallback, std::size_t min, std::size_t max) {
  auto text = env_string(name);
  if (!text) {
    return fallback;
  }
  const bool digits =
      std::all_of(text->begin(), text->end(), [](char c) { return c >= '0' && c <= '9'; });
  auto value = digits ? parse_size(*text) : std::nullopt;
  if (!value || *value < min || *value > max) {
    throw_errno(EINVAL, std::string(name) + "=" + std::string(*text) +
                            ": expected a whole number between " + std::to_string(min) + " and " +
                            std::to_string(max));
  }
  return *value;
}

}  // namespace phx::detail
