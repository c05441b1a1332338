// SPDX-License-Identifier: MIT
#include "units.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace phxtools {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char &c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Splits "12.5ms" into 12.5 and "ms"; throws when no number leads.
std::pair<double, std::string> number_and_unit(std::string_view text, std::string_view what) {
  double value = 0;
  const char *end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || !std::isfinite(value) || value < 0) {
    throw std::invalid_argument(std::string(what) + " '" + std::string(text) +
                                "' is not a non-negative number");
  }
  return {value, lower(std::string_view(ptr, static_cast<std::size_t>(end - ptr)))};
}

}  // namespace

std::uint64_t parse_size(std::string_view text) {
  const auto [value, unit] = number_and_unit(text, "size");
  int shift = -1;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else {
    static constexpr std::string_view kUnits = "kmgtp";
    const std::size_t pos = kUnits.find(unit[0]);
    if (pos != std::string_view::npos &&
        (unit.size() == 1 || unit.substr(1) == "b" || unit.substr(1) == "ib")) {
      shift = 10 * (static_cast<int>(pos) + 1);
    }
  }
  if (shift < 0) {
    throw std::invalid_argument("size '" + std::string(text) +
                                "' has an unknown unit (use K, M, G, T: powers of 1024)");
  }
  const double bytes = std::ldexp(value, shift);
  if (bytes >= std::ldexp(1.0, 63) || bytes != std::floor(bytes)) {
    throw std::invalid_argument("size '" + std::string(text) +
                                "' is not a whole number of bytes below 2^63");
  }
  return static_cast<std::uint64_t>(bytes);
}

std::uint64_t parse_address(std::string_view text) {
  if (text.starts_with("0x") || text.starts_with("0X")) {
    const std::string_view digits = text.substr(2);
    std::uint64_t value = 0;
    const char *end = digits.data() + digits.size();
    const auto [ptr, ec] = std::from_chars(digits.data(), end, value, 16);
    if (digits.empty() || ec != std::errc() || ptr != end) {
      throw std::invalid_argument("address '" + std::string(text) +
                                  "' is not a hexadecimal number below 2^64");
    }
    return value;
  }
  try {
    return parse_size(text);
  } catch (const std::invalid_argument &) {
    throw std::invalid_argument("address '" + std::string(text) +
                                "' is neither 0x<hex>, a number nor a size (192M)");
  }
}

double parse_seconds(std::string_view text) {
  const auto [value, unit] = number_and_unit(text, "time");
  if (unit.empty() || unit == "s") {
    return value;
  }
  if (unit == "ms") {
    return value / 1000.0;
  }
  if (unit == "m" || unit == "min") {
    return value * 60.0;
  }
  throw std::invalid_argument("time '" + std::string(text) +
                              "' has an unknown unit (use s, ms, m)");
}

}  // namespace phxtools
