// SPDX-License-Identifier: MIT
#include "timing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

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
  const auto rank = static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(s.count)));
  s.p95 = samples[std::max<std::size_t>(rank, 1) - 1];
  return s;
}

}  // namespace phxtools
