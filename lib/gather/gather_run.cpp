// SPDX-License-Identifier: MIT
#include "gather/gather_run.hpp"

#include <cerrno>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "gather/gather_plan.hpp"

namespace phx::detail {
namespace {

struct EntryState {
  std::size_t bytes = 0;
  int error = 0;
  bool failed = false;
};

// Moves @p entries and records each one's outcome in states[index[i]];
// returns the requests issued.  Entries a failed merged request covered
// from where it stopped are appended to @p retry.
std::size_t move_round(GatherMover &mover, Direction dir, std::span<const GatherEntry> entries,
                       std::span<const std::size_t> index, std::size_t max_request, bool merge,
                       std::vector<EntryState> &states, std::vector<std::size_t> &retry) {
  const GatherPlan plan = plan_gather(entries, max_request, merge);
  std::vector<RequestOutcome> outcomes(plan.requests.size());
  mover.move(dir, plan.requests, outcomes);
  for (std::size_t i = 0; i < plan.requests.size(); ++i) {
    const PlannedRequest &r = plan.requests[i];
    const RequestOutcome &o = outcomes[i];
    if (r.count == 1) {
      EntryState &s = states[index[plan.order[r.first]]];
      s.bytes += o.bytes;
      if ((o.error != 0 || o.bytes < r.size) && !s.failed) {
        s.failed = true;
        s.error = o.error;
      }
      continue;
    }
    std::size_t left = o.bytes;
    for (std::size_t k = r.first; k < r.first + r.count; ++k) {
      const std::size_t entry = plan.order[k];
      if (o.error == 0 && o.bytes == r.size) {
        states[index[entry]].bytes += entries[entry].size;
      } else if (left >= entries[entry].size) {
        states[index[entry]].bytes += entries[entry].size;
        left -= entries[entry].size;
      } else {
        left = 0;
        retry.push_back(entry);
      }
    }
  }
  return plan.requests.size();
}

}  // namespace

void validate_entries(std::span<const GatherEntry> entries) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const GatherEntry &e = entries[i];
    const std::string which = "gather entry " + std::to_string(i);
    if (e.file == nullptr) {
      throw_errno(EINVAL, which + ": no file");
    }
    if (e.registration == nullptr || !*e.registration) {
      throw_errno(EINVAL, which + ": no registration");
    }
    if (e.reg_offset > e.registration->size() || e.size > e.registration->size() - e.reg_offset) {
      throw_errno(EINVAL, describe_io("gather", e.file->path(), e.file_offset, e.size) +
                              ": entry " + std::to_string(i) + " at registration offset " +
                              std::to_string(e.reg_offset) + " exceeds the registration's " +
                              std::to_string(e.registration->size()) + " bytes");
    }
  }
}

GatherResult run_gather(GatherMover &mover, Direction dir, std::span<const GatherEntry> entries,
                        std::size_t max_request, bool merge) {
  validate_entries(entries);
  GatherResult result;
  result.entries = entries.size();
  std::vector<EntryState> states(entries.size());
  std::vector<std::size_t> identity(entries.size());
  for (std::size_t i = 0; i < identity.size(); ++i) {
    identity[i] = i;
  }
  std::vector<std::size_t> retry;
  result.requests = move_round(mover, dir, entries, identity, max_request, merge, states, retry);
  if (!retry.empty()) {
    std::vector<GatherEntry> again;
    again.reserve(retry.size());
    for (const std::size_t i : retry) {
      again.push_back(entries[i]);
    }
    std::vector<std::size_t> unused;
    result.requests += move_round(mover, dir, again, retry, max_request, false, states, unused);
  }
  for (std::size_t i = 0; i < states.size(); ++i) {
    result.bytes += states[i].bytes;
    if (states[i].failed) {
      result.failures.push_back({i, states[i].error, states[i].bytes});
    }
  }
  return result;
}

}  // namespace phx::detail
