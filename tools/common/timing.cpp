// SPDX-License-Identifier: MIT
#include "timing.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iterator>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>

namespace phxtools {

SampleSummary summarize(std::vector<double> samples) {
  if (samples.empty()) {
    throw std::invalid_argument("summarize: no samples");
  }
  SampleSummary s;
  s.count = samples.size();
  s.first = samples.front();
  std::sort(samples.begin(), samples.end());
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(s.count);
  s.min = samples.front();
  s.max = samples.back();
  s.p50 = samples[(s.count - 1) / 2];
  const auto nearest_rank = [&](double q) {
    const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(s.count)));
    return samples[std::max<std::size_t>(rank, 1) - 1];
  };
  s.p95 = nearest_rank(0.95);
  s.p99 = nearest_rank(0.99);
  return s;
}

double process_seconds() noexcept {
  try {
    std::ifstream in("/proc/self/stat");
    const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the command name, which may itself hold spaces and ')'.
    const auto close = stat.rfind(')');
    if (close == std::string::npos) {
      return -1;
    }
    std::istringstream fields(stat.substr(close + 2));
    std::string field;
    // starttime is field 22 of the line; the text after ") " starts at field 3.
    for (int i = 3; i <= 22 && (fields >> field); ++i) {
    }
    const long ticks = ::sysconf(_SC_CLK_TCK);
    timespec now{};
    if (!fields || ticks <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) {
      return -1;
    }
    const double started = std::stod(field) / static_cast<double>(ticks);
    return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9 - started;
  } catch (...) {
    return -1;
  }
}

}  // namespace phxtools
