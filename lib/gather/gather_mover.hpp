// SPDX-License-Identifier: MIT
// How an engine moves a gather's planned requests: through io_uring
// straight into the registration's host view (direct, host), or through
// pinned staging and GPU copies (compat).
#ifndef PHOENIX_LIB_GATHER_MOVER_HPP
#define PHOENIX_LIB_GATHER_MOVER_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gather/gather_plan.hpp"
#include "io/aligned_io.hpp"

namespace phx::detail {

struct RequestOutcome {
  std::size_t bytes = 0;
  int error = 0;  ///< 0 with bytes < size: a read that reached end of file
};

class GatherMover {
 public:
  GatherMover() = default;
  virtual ~GatherMover() = default;
  GatherMover(const GatherMover &) = delete;
  GatherMover &operator=(const GatherMover &) = delete;
  GatherMover(GatherMover &&) = delete;
  GatherMover &operator=(GatherMover &&) = delete;

  /// Runs every request; outcomes[i] is requests[i]'s.  Failures of single
  /// requests go to their outcome; throws std::system_error only when the
  /// mover itself breaks (io_uring, CUDA).
  virtual void move(Direction dir, std::span<const PlannedRequest> requests,
                    std::span<RequestOutcome> outcomes) = 0;

  /// Adds the bytes of each read to @p counter as it lands (null: nothing
  /// counted): a long move's progress, read on another thread.  The staged
  /// mover counts; the host-view mover's queue reports only at its end.
  void count_reads_into(std::atomic<std::uint64_t> *counter) noexcept { read_counter_ = counter; }

 protected:
  void count_read(std::size_t bytes) noexcept {
    if (read_counter_ != nullptr) {
      *read_counter_ += bytes;
    }
  }

 private:
  std::atomic<std::uint64_t> *read_counter_ = nullptr;
};

/// Per request, nonzero where its registration's memory was freed since it
/// was registered (logged once per registration); throws EINVAL for a
/// request larger than @p slot_size.  The staged movers' first step.
void lost_requests(std::span<const PlannedRequest> requests, std::size_t slot_size,
                   std::vector<char> &lost);

/// io_uring into the registrations' host views, @p depth entries.
[[nodiscard]] std::unique_ptr<GatherMover> make_host_view_mover(unsigned depth);

/// io_uring into pinned staging of @p slots slots (0: @p depth x 2) of
/// @p slot_size bytes, then cuMemcpyAsync on GPU @p device_id (PHX_WITH_CUDA
/// builds; otherwise throws ENOTSUP).  @p slots, when given, is more than
/// @p depth: a read in flight holds its slot.
[[nodiscard]] std::unique_ptr<GatherMover> make_staged_mover(int device_id, unsigned depth,
                                                             std::size_t slot_size,
                                                             std::size_t slots = 0);

/// @p threads reader threads, each a synchronous pread at a time into one
/// of its two pinned slots of @p slot_size bytes, then cuMemcpyHtoDAsync on
/// its own stream of GPU @p device_id; the requests from one shared cursor
/// in order, or with @p stripes each thread its own contiguous stripe of
/// them.  Reads only (PHX_WITH_CUDA builds; otherwise throws ENOTSUP).
[[nodiscard]] std::unique_ptr<GatherMover> make_reader_threads_mover(int device_id,
                                                                     unsigned threads,
                                                                     std::size_t slot_size,
                                                                     bool stripes = false);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_GATHER_MOVER_HPP
