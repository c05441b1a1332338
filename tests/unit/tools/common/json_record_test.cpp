// SPDX-License-Identifier: MIT
// The tools' JSON records (tools/common/json_record.hpp): one line per
// record on stdout and in a --json-out file, values that parse back, null
// for what is absent, and the per-step statistics on samples worked out by
// hand.
#include "common/json_record.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "phoenix/phoenix.h"

namespace phxtools {
namespace {

using nlohmann::ordered_json;

std::filesystem::path scratch(const char *name) {
  return std::filesystem::temp_directory_path() /
         (std::string("phx_json_record_") + name + "_" + std::to_string(::getpid()));
}

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    out.push_back(line);
  }
  return out;
}

std::string file_text(const std::filesystem::path &path) {
  const std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Records of the shapes the tools print: nested objects, arrays, null, and
// a string holding a newline (escaped, so still one line).
std::vector<ordered_json> sample_records() {
  ordered_json first = record_head("phx-test", {.schema = "phx-test/1"});
  first["size"] = std::uint64_t{1} << 40;
  first["mean_us"] = 12.5;
  first["ok"] = true;
  first["error"] = nullptr;
  ordered_json second = {{"tool", "phx-test"},
                         {"message", "two\nlines"},
                         {"sizes", {4096, 65536}},
                         {"verify", {{"ran", false}, {"first_mismatch", nullptr}}}};
  return {first, second};
}

TEST(JsonRecord, OneLinePerRecordOnStdoutThatParsesBack) {
  const std::vector<ordered_json> records = sample_records();
  testing::internal::CaptureStdout();
  {
    RecordWriter out(true);
    for (const ordered_json &r : records) {
      out.write(r);
    }
  }
  const std::vector<std::string> lines = lines_of(testing::internal::GetCapturedStdout());
  ASSERT_EQ(lines.size(), records.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(ordered_json::parse(lines[i]), records[i]) << lines[i];
  }
}

TEST(JsonRecord, FileAndStdoutBothGetEveryRecord) {
  const auto path = scratch("both");
  {
    std::ofstream stale(path);
    stale << "an older run's line\n";
  }
  const std::vector<ordered_json> records = sample_records();
  testing::internal::CaptureStdout();
  {
    RecordWriter out(true, path.string());
    EXPECT_EQ(out.path(), path.string());
    EXPECT_EQ(&out.human(), &std::cerr);  // stdout carries records
    // Moved, it still owns the file.
    RecordWriter moved = std::move(out);
    for (const ordered_json &r : records) {
      moved.write(r);
    }
  }
  const std::string printed = testing::internal::GetCapturedStdout();
  const std::string written = file_text(path);
  std::filesystem::remove(path);
  EXPECT_EQ(written, printed);  // the older line is gone: the file is truncated
  const std::vector<std::string> lines = lines_of(written);
  ASSERT_EQ(lines.size(), records.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(ordered_json::parse(lines[i]), records[i]) << lines[i];
  }
}

TEST(JsonRecord, FileAloneLeavesStdoutToTheHumanLines) {
  const auto path = scratch("file_only");
  testing::internal::CaptureStdout();
  {
    RecordWriter out(false, path.string());
    EXPECT_FALSE(out.to_stdout());
    EXPECT_EQ(&out.human(), &std::cout);
    out.write({{"n", 1}});
    out.write({{"n", 2}});
  }
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(file_text(path), "{\"n\":1}\n{\"n\":2}\n");
  std::filesystem::remove(path);
}

TEST(JsonRecord, UnopenablePathThrowsNamingIt) {
  const std::string path = "/nonexistent-phx-dir/records.jsonl";
  try {
    const RecordWriter out(true, path);
    FAIL() << "opened " << path;
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(JsonRecord, BytesThatAreNotUtf8StillGiveALine) {
  testing::internal::CaptureStdout();
  RecordWriter(true).write({{"path", std::string("bad\xff")}});
  const std::vector<std::string> lines = lines_of(testing::internal::GetCapturedStdout());
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_EQ(ordered_json::parse(lines[0])["path"], "bad\xEF\xBF\xBD");  // U+FFFD
}

TEST(JsonRecord, OptionalIsTheValueOrNull) {
  EXPECT_TRUE(optional_json(std::optional<std::uint64_t>{}).is_null());
  EXPECT_EQ(optional_json(std::optional<std::uint64_t>{42}), 42);
  EXPECT_TRUE(optional_json(std::optional<double>{}).is_null());
  EXPECT_EQ(optional_json(std::optional<double>{0.25}), 0.25);
  EXPECT_EQ(optional_json(std::optional<std::string>{"x"}), "x");
  // And through a line: null, not a missing field.
  const ordered_json back = ordered_json::parse(
      ordered_json{{"first_mismatch", optional_json(std::optional<std::uint64_t>{})}}.dump());
  ASSERT_TRUE(back.contains("first_mismatch"));
  EXPECT_TRUE(back["first_mismatch"].is_null());
}

TEST(JsonRecord, HeadNamesSchemaToolAndLibraryVersionInOrder) {
  const ordered_json head = record_head("phx-test", {.schema = "phx-test/1"});
  EXPECT_EQ(head.dump(),
            std::string("{\"schema\":\"phx-test/1\",\"tool\":\"phx-test\",\"version\":\"") +
                phxfs_version() + "\"}");
  EXPECT_EQ(record_head("phx-test"),
            (ordered_json{{"tool", "phx-test"}, {"version", phxfs_version()}}));
  EXPECT_EQ(record_head("phx-test", {.schema = "phx-test/1", .tool = false}),
            (ordered_json{{"schema", "phx-test/1"}, {"version", phxfs_version()}}));
}

// 1..20 in a shuffled order, 13 first.  Sorted, sample i is i + 1: the
// lower median is sample (20 - 1) / 2 = 9, i.e. 10; the nearest rank of
// p95 is ceil(0.95 * 20) = 19 and of p99 ceil(0.99 * 20) = 20; the mean
// is 210 / 20.
std::vector<double> known_samples() {
  return {13, 4, 20, 1, 7, 16, 10, 2, 19, 8, 5, 14, 11, 17, 3, 9, 18, 12, 6, 15};
}

TEST(JsonRecord, LatencyStatisticsOnKnownSamples) {
  const ordered_json s = latency_json(known_samples());
  EXPECT_EQ(s["count"], 20);
  EXPECT_DOUBLE_EQ(s["first"].get<double>(), 13.0);
  EXPECT_DOUBLE_EQ(s["mean"].get<double>(), 10.5);
  EXPECT_DOUBLE_EQ(s["min"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s["p50"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(s["p95"].get<double>(), 19.0);
  EXPECT_DOUBLE_EQ(s["p99"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(s["max"].get<double>(), 20.0);
  // A record line keeps the values.
  EXPECT_EQ(ordered_json::parse(s.dump()), s);
}

TEST(JsonRecord, LatencySuffixNamesEveryStatisticButTheCount) {
  const ordered_json s = latency_json(known_samples(), "_us");
  std::vector<std::string> names;
  for (const auto &item : s.items()) {
    names.push_back(item.key());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"count", "first_us", "mean_us", "min_us", "p50_us",
                                             "p95_us", "p99_us", "max_us"}));
  EXPECT_DOUBLE_EQ(s["p50_us"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(s["p99_us"].get<double>(), 20.0);
  EXPECT_EQ(summary_json(summarize(known_samples()), "_us"), s);
}

TEST(JsonRecord, LatencyOfNoSamplesIsNull) {
  EXPECT_TRUE(latency_json({}).is_null());
  EXPECT_TRUE(latency_json({}, "_us").is_null());
  const ordered_json one = latency_json({2.5});
  EXPECT_EQ(one["count"], 1);
  for (const char *name : {"first", "mean", "min", "p50", "p95", "p99", "max"}) {
    EXPECT_DOUBLE_EQ(one[name].get<double>(), 2.5) << name;
  }
}

}  // namespace
}  // namespace phxtools
