// SPDX-License-Identifier: MIT
#include "json_record.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <iostream>
#include <system_error>
#include <utility>

#include "phoenix/phoenix.h"

namespace phxtools {

using nlohmann::ordered_json;

ordered_json record_head(std::string_view tool, const RecordHead &head) {
  ordered_json rec = ordered_json::object();
  if (!head.schema.empty()) {
    rec["schema"] = head.schema;
  }
  if (head.tool) {
    rec["tool"] = tool;
  }
  rec["version"] = phxfs_version();
  return rec;
}

ordered_json summary_json(const SampleSummary &s, std::string_view suffix) {
  const auto name = [&](const char *field) {
    std::string out(field);
    out += suffix;
    return out;
  };
  ordered_json out = ordered_json::object();
  out["count"] = s.count;
  out[name("first")] = s.first;
  out[name("mean")] = s.mean;
  out[name("min")] = s.min;
  out[name("p50")] = s.p50;
  out[name("p95")] = s.p95;
  out[name("p99")] = s.p99;
  out[name("max")] = s.max;
  return out;
}

ordered_json latency_json(const std::vector<double> &samples, std::string_view suffix) {
  if (samples.empty()) {
    return nullptr;
  }
  return summary_json(summarize(samples), suffix);
}

RecordWriter::RecordWriter(bool to_stdout, std::string path)
    : to_stdout_(to_stdout), path_(std::move(path)) {
  if (!path_.empty()) {
    // 0666 less the umask, as a shell's redirection creates it.
    file_ = open_fd(path_, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  }
}

void RecordWriter::write(const ordered_json &record) {
  std::string line = record.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  line += '\n';
  if (to_stdout_) {
    std::cout << line << std::flush;
  }
  if (!file_) {
    return;
  }
  // write(2), not pwrite: the path may name a pipe or a terminal.
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(file_.get(), line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw std::system_error(n < 0 ? errno : EIO, std::system_category(), "write " + path_);
    }
    done += static_cast<std::size_t>(n);
  }
}

std::ostream &RecordWriter::human() const {
  return to_stdout_ ? std::cerr : std::cout;
}

}  // namespace phxtools
