// SPDX-License-Identifier: MIT
#include "options.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace phxbench {

std::string_view to_string(Mode mode) noexcept {
  switch (mode) {
    case Mode::sync:
      return "sync";
    case Mode::async:
      return "async";
    case Mode::batch:
      return "batch";
    case Mode::stream:
      return "stream";
  }
  return "unknown";
}

std::string_view to_string(IoDir dir) noexcept {
  return dir == IoDir::read ? "read" : "write";
}

std::string_view to_string(Pattern pattern) noexcept {
  return pattern == Pattern::seq ? "seq" : "rand";
}

}  // namespace phxbench
