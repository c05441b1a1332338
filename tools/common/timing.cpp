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
  const auto nearest_rank = [&](double q) {
    const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(s.count)));
    return samples[std::max<std::size_t>(rank, 1) - 1];
  };
  s.p95 = nearest_rank(0.95);
  s.p99 = nearest_rank(0.99);
  return s;
}

}  // namespace phxtools
