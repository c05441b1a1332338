// SPDX-License-Identifier: MIT
// Stream-ordered I/O (phxfs_read_async/phxfs_write_async, File::read_async).
//
// The paper runs each I/O inside cudaLaunchHostFunc: the stream stalls for
// the whole I/O and CUDA's single callback thread runs the I/Os of all
// streams one after another.  Here the caller's thread only enqueues, on
// the stream, an event record (marks "prior work done") and a
// cuStreamWaitValue32 on a flag in pinned host memory.  An I/O thread waits
// for the event, runs the transfer through the device's engine (in
// parallel chunks for compat), stores bytes_done, then the flag: the stream
// resumes exactly after the I/O, and I/Os of different streams (and
// devices) run at the same time on different threads.
//
// Ownership: each DeviceState owns one StreamIo, made at its first
// stream-ordered I/O (DeviceState::stream_io()).  Every queued op holds a
// reference to its DeviceState, so the StreamIo is destroyed only once no
// op refers to it; its destructor then joins the workers and frees the
// flags, events and staging.  The last reference may be dropped by one of
// the StreamIo's own workers: that worker is detached instead of joined and
// exits as soon as it returns to its loop (it holds the shared state alive
// itself).  A per-device owner rather than a process-wide one: limits are
// per device (as phx::Options will be), and nothing outlives the devices.
#ifndef PHOENIX_LIB_STREAM_IO_HPP
#define PHOENIX_LIB_STREAM_IO_HPP

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/mapping.hpp"
#include "io/aligned_io.hpp"

struct CUstream_st;

namespace phx::detail {

class DeviceState;

/// What one device's stream-ordered I/O may use.  Per device, fixed when its
/// StreamIo is made.
struct StreamLimits {
  /// I/O threads, at most; made when an op finds none idle.  Ops beyond
  /// them queue (first in, first out); a queued op holds a CUDA event and a
  /// 4-byte flag, which the pools keep until the device closes.
  std::size_t workers = 16;
  /// Pinned staging for the compat engine's stream-ordered I/O, at most.  A
  /// submit that finds it all in use waits until earlier ops give theirs
  /// back; one op never needs more than the whole budget (it uses fewer or
  /// smaller slots), so any op makes progress.
  std::size_t staging_bytes = std::size_t{256} << 20;
  /// Bytes per staging slot (one pread/pwrite, one copy in the stream); an
  /// op smaller than this takes the next power of two from 64 KiB.
  std::size_t chunk = std::size_t{4} << 20;
  /// The same for O_DIRECT descriptors (larger: O_DIRECT reads are not
  /// merged by the page cache).
  std::size_t direct_chunk = std::size_t{16} << 20;
  /// Staging slots one op cycles through: chunks of one I/O in flight.
  std::size_t depth = 4;
  /// Threads that read one staged read's chunks at once (the op's I/O
  /// thread and lanes - 1 more), at most one per slot.  With one, an op's
  /// chunks are read one after another, and only `depth` of them ahead of
  /// the stream: the ops behind it in the same stream wait for the stream to
  /// reach them once their slots are full.
  std::size_t lanes = 1;
  /// Idle staging is given back after this long without an op in flight.
  std::chrono::milliseconds idle_trim{2000};
};

/// Counters for tests and diagnostics.
struct StreamIoStats {
  std::size_t threads_created = 0;     ///< workers ever started
  std::size_t threads_live = 0;        ///< workers not yet exited
  std::size_t staging_held = 0;        ///< pinned staging bytes owned now
  std::size_t staging_peak = 0;        ///< the most staging_held has been
  std::size_t staging_waits = 0;       ///< submits that waited for staging
  std::size_t staging_wait_polls = 0;  ///< their looks at reads waiting for streams
  std::size_t staging_leaked = 0;      ///< given up after a failed CUDA call
  std::size_t reap_polls = 0;          ///< idle workers' looks at reads waiting for streams
};

struct StreamRequest {
  Direction dir = Direction::read;
  int fd = -1;
  std::shared_ptr<DeviceState> device;  // keeps the engine alive
  std::shared_ptr<Mapping> mapping;     // keeps the registration alive
  std::size_t mapping_offset = 0;
  std::size_t size = 0;
  std::uint64_t file_offset = 0;
  IoPolicy policy;
  ssize_t *bytes_done = nullptr;  // bytes moved, or -errno when nothing moved
  // A descriptor the library opened for this request (the cache policy's
  // buffered twin): open until the request is done.
  std::shared_ptr<const void> owned_fd;
};

/// One device's stream-ordered I/O: a bounded pool of I/O threads, a
/// bounded pool of staging slots, the flags and events the streams wait on.
class StreamIo {
 public:
  /// Allocates nothing yet: threads, flags and staging come with the ops.
  StreamIo(int device_id, const StreamLimits &limits);
  /// Waits for every op submitted here (they finish as their streams
  /// progress), joins the workers and frees what the pools hold.
  ~StreamIo();
  StreamIo(const StreamIo &) = delete;
  StreamIo &operator=(const StreamIo &) = delete;
  StreamIo(StreamIo &&) = delete;
  StreamIo &operator=(StreamIo &&) = delete;

  /// Enqueues @p request on @p stream; see submit_stream_ordered.  May
  /// block while the staging budget is in use by earlier ops.
  void submit(StreamRequest request, CUstream_st *stream);

  [[nodiscard]] const StreamLimits &limits() const noexcept { return limits_; }
  [[nodiscard]] StreamIoStats stats() const;

  struct Core;

 private:
  StreamLimits limits_;
  std::shared_ptr<Core> core_;
};

/// Enqueues @p request on @p stream through its device's StreamIo.  Throws
/// std::system_error: ENOTSUP without CUDA, EINVAL for a capturing or
/// foreign stream, CUDA errors.
void submit_stream_ordered(StreamRequest request, CUstream_st *stream);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_STREAM_IO_HPP
