// SPDX-License-Identifier: MIT
#include "trace.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <stdexcept>

namespace phx::kvcache {
namespace {

[[noreturn]] void malformed(const std::string &name, std::size_t line, const std::string &why) {
  throw std::runtime_error(name + ":" + std::to_string(line) + ": " + why);
}

std::string conversation_id(const std::string &text) {
  static constexpr std::string_view kKey = "conversation id: ";
  const std::size_t at = text.find(kKey);
  if (at == std::string::npos) {
    return {};
  }
  const std::size_t start = at + kKey.size();
  const std::size_t end = text.find(')', start);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

void parse_ids(const std::string &text, const std::string &name, std::size_t line,
               std::vector<std::uint64_t> &out) {
  const std::size_t open = text.find('[');
  const std::size_t close = text.find(']', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos) {
    malformed(name, line, "a Round line without a [...] list");
  }
  const char *p = text.data() + open + 1;
  const char *end = text.data() + close;
  for (;;) {
    while (p < end && (*p == ' ' || *p == ',')) {
      ++p;
    }
    if (p == end) {
      return;
    }
    std::uint64_t id = 0;
    const auto [next, ec] = std::from_chars(p, end, id);
    if (ec != std::errc{} || (next < end && *next != ',' && *next != ' ')) {
      malformed(name, line,
                "bad block id near \"" +
                    std::string(p, std::min<std::size_t>(12, static_cast<std::size_t>(end - p))) +
                    "\"");
    }
    out.push_back(id);
    p = next;
  }
}

}  // namespace

std::uint64_t Trace::block_count() const noexcept {
  std::uint64_t n = 0;
  for (const Sequence &s : sequences) {
    n += s.blocks.size();
  }
  return n;
}

std::uint64_t Trace::largest_block() const noexcept {
  std::uint64_t largest = 0;
  for (const Sequence &s : sequences) {
    for (const std::uint64_t b : s.blocks) {
      largest = std::max(largest, b);
    }
  }
  return largest;
}

std::size_t Trace::longest_sequence() const noexcept {
  std::size_t longest = 0;
  for (const Sequence &s : sequences) {
    longest = std::max(longest, s.blocks.size());
  }
  return longest;
}

Trace parse_trace(std::istream &in, std::string name) {
  Trace trace;
  trace.name = std::move(name);
  std::string text;
  for (std::size_t line = 1; std::getline(in, text); ++line) {
    if (text.starts_with("Seq")) {
      trace.sequences.push_back({conversation_id(text), {}});
    } else if (text.starts_with("Round")) {
      if (trace.sequences.empty()) {
        malformed(trace.name, line, "a Round line before any Seq line");
      }
      parse_ids(text, trace.name, line, trace.sequences.back().blocks);
    } else if (text.find_first_not_of(" \t\r") != std::string::npos) {
      malformed(trace.name, line, "neither a Seq nor a Round line");
    }
  }
  return trace;
}

Trace load_trace(const std::filesystem::path &path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open trace " + path.string());
  }
  return parse_trace(in, path.filename().string());
}

}  // namespace phx::kvcache
