// SPDX-License-Identifier: MIT
// Turning gather entries into requests: entries contiguous in both the file
// and the registration become one request, requests longer than the limit
// are cut.  Pure computation, so the merging rules are tested on their own.
#ifndef PHOENIX_LIB_GATHER_PLAN_HPP
#define PHOENIX_LIB_GATHER_PLAN_HPP

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "phoenix/gather.hpp"

namespace phx::detail {

/// One request: [reg_offset, +size) of @p registration <-> [file_offset,
/// +size) of @p file.  It covers entries order[first .. first + count) whole,
/// or (count 1) a piece of one entry that was split.
struct PlannedRequest {
  File *file = nullptr;
  const Registration *registration = nullptr;
  std::size_t reg_offset = 0;
  std::uint64_t file_offset = 0;
  std::size_t size = 0;
  std::size_t first = 0;
  std::size_t count = 0;
};

struct GatherPlan {
  /// Entry indices sorted by file, registration and file offset: the order
  /// in which requests cover them.  Entries of size 0 are left out.
  std::vector<std::size_t> order;
  std::vector<PlannedRequest> requests;
};

/// Plans @p entries with requests of at most @p max_request bytes; merges
/// only when @p merge.  Entries must already be validated.
[[nodiscard]] GatherPlan plan_gather(std::span<const GatherEntry> entries, std::size_t max_request,
                                     bool merge);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_GATHER_PLAN_HPP
