// SPDX-License-Identifier: MIT
// One gather operation from entries to result: validate, plan, move, give
// each entry its outcome, and retry alone the entries a failed merged
// request covered, so an entry's outcome is what it would have been alone.
#ifndef PHOENIX_LIB_GATHER_RUN_HPP
#define PHOENIX_LIB_GATHER_RUN_HPP

#include <span>

#include "gather/gather_mover.hpp"
#include "phoenix/gather.hpp"

namespace phx::detail {

/// Throws std::system_error(EINVAL) naming the first entry without a file
/// or registration, or outside its registration.
void validate_entries(std::span<const GatherEntry> entries);

[[nodiscard]] GatherResult run_gather(GatherMover &mover, Direction dir,
                                      std::span<const GatherEntry> entries, std::size_t max_request,
                                      bool merge);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_GATHER_RUN_HPP
