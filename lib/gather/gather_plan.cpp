// SPDX-License-Identifier: MIT
#include "gather/gather_plan.hpp"

#include <algorithm>
#include <tuple>

namespace phx::detail {
namespace {

bool mergeable(const PlannedRequest &run, const GatherEntry &next, std::size_t max_request) {
  return run.file == next.file && run.registration == next.registration &&
         run.file_offset + run.size == next.file_offset &&
         run.reg_offset + run.size == next.reg_offset && next.size <= max_request - run.size;
}

}  // namespace

GatherPlan plan_gather(std::span<const GatherEntry> entries, std::size_t max_request, bool merge) {
  GatherPlan plan;
  plan.order.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].size != 0) {
      plan.order.push_back(i);
    }
  }
  if (merge) {
    // Only neighbours in file order can merge; entries given out of order
    // (a pool filled from a free list) still find their neighbours.
    const auto key = [&entries](std::size_t i) {
      const GatherEntry &e = entries[i];
      return std::make_tuple(reinterpret_cast<std::uintptr_t>(e.file),
                             reinterpret_cast<std::uintptr_t>(e.registration), e.file_offset,
                             e.reg_offset);
    };
    std::stable_sort(plan.order.begin(), plan.order.end(),
                     [&key](std::size_t a, std::size_t b) { return key(a) < key(b); });
  }
  plan.requests.reserve(plan.order.size());
  // Whether the last request covers whole entries: a split entry's pieces
  // never merge with a neighbour, so a request is whole entries or one piece.
  bool last_whole = false;
  for (std::size_t k = 0; k < plan.order.size(); ++k) {
    const GatherEntry &e = entries[plan.order[k]];
    if (merge && last_whole && mergeable(plan.requests.back(), e, max_request)) {
      plan.requests.back().size += e.size;
      ++plan.requests.back().count;
      continue;
    }
    last_whole = e.size <= max_request;
    for (std::size_t done = 0; done < e.size;) {
      const std::size_t piece = std::min(e.size - done, max_request);
      plan.requests.push_back(
          {e.file, e.registration, e.reg_offset + done, e.file_offset + done, piece, k, 1});
      done += piece;
    }
  }
  return plan;
}

}  // namespace phx::detail
