// SPDX-License-Identifier: MIT
// The tools' JSON records: one object per line on stdout (and, with a
// --json-out style option, in a file too), flushed line by line so that a
// run killed later keeps what it measured.  The fields every record starts
// with, optional values as null, and sample statistics as objects
// (timing.hpp's summary: first, mean, min, p50, p95, p99, max).
#ifndef PHX_TOOLS_JSON_RECORD_HPP
#define PHX_TOOLS_JSON_RECORD_HPP

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.hpp"
#include "common/timing.hpp"

namespace phxtools {

/// Which of the shared fields record_head() gives.  A tool whose records
/// have a documented schema keeps to it (phx-e2e's has no "tool").
struct RecordHead {
  std::string_view schema;  ///< "schema": the format, e.g. "phx-e2e/1"; left out when empty
  bool tool = true;         ///< "tool": the tool's name
};

/// The fields a record of @p tool starts with, in this order: "schema"
/// (when @p head names one), "tool" (unless @p head leaves it out), and
/// "version": libphoenix's, phxfs_version().
[[nodiscard]] nlohmann::ordered_json record_head(std::string_view tool,
                                                 const RecordHead &head = {});

/// @p value, or null when it has none.
template <typename T>
[[nodiscard]] nlohmann::ordered_json optional_json(const std::optional<T> &value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

/// @p s as an object: "count", then "first", "mean", "min", "p50", "p95",
/// "p99" and "max", each of these names followed by @p suffix ("_us" gives
/// "p50_us"; count has none).  Values in the samples' unit.
[[nodiscard]] nlohmann::ordered_json summary_json(const SampleSummary &s,
                                                  std::string_view suffix = {});

/// summary_json(summarize(@p samples), @p suffix); null when there are no
/// samples.
[[nodiscard]] nlohmann::ordered_json latency_json(const std::vector<double> &samples,
                                                  std::string_view suffix = {});

/// Writes records one per line: to stdout when asked (flushed after each),
/// and to a file when given a path (created or truncated on construction,
/// each line written with write(2) as it comes); to neither, records go
/// nowhere.  Move-only: it owns the file.
class RecordWriter {
 public:
  /// @p to_stdout: records on stdout (a tool's --json).  @p path: a file
  /// for them too (a tool's --json-out), none when empty.  Throws
  /// std::system_error "open <path>" when the file cannot be opened.
  explicit RecordWriter(bool to_stdout, std::string path = {});

  RecordWriter(RecordWriter &&) noexcept = default;
  RecordWriter &operator=(RecordWriter &&) noexcept = default;
  RecordWriter(const RecordWriter &) = delete;
  RecordWriter &operator=(const RecordWriter &) = delete;
  ~RecordWriter() = default;

  /// Writes @p record as one line.  Strings that are not UTF-8 are
  /// written with U+FFFD in place of the bad bytes.  Throws
  /// std::system_error "write <path>" when the file refuses the line.
  void write(const nlohmann::ordered_json &record);

  /// Where the tool's human-readable lines go: stderr while stdout carries
  /// records, stdout otherwise.
  [[nodiscard]] std::ostream &human() const;

  [[nodiscard]] bool to_stdout() const noexcept { return to_stdout_; }
  [[nodiscard]] const std::string &path() const noexcept { return path_; }

 private:
  bool to_stdout_ = false;
  std::string path_;
  UniqueFd file_;
};

}  // namespace phxtools

#endif  // PHX_TOOLS_JSON_RECORD_HPP
