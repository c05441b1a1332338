// SPDX-License-Identifier: MIT
// gather.hpp - many small transfers between files and registered memory as
// few, large and parallel requests: paged KV-cache blocks, scattered weights.
//
//   phx::Gather gather(dev);
//   auto entries = phx::paged_blocks(file, pool, 16384, file_blocks, pool_slots);
//   phx::GatherResult r = gather.read(entries);      // or read_async / read_on_stream
//   for (const phx::GatherFailure &f : r.failures) { /* entries[f.index] failed: f.error */ }
//
// Entries contiguous in both the file and the registration are merged, long
// runs are split, and everything is submitted at once (no batch limit): the
// direct and host engines through io_uring straight into the registration,
// the compat engine through io_uring into pinned staging and asynchronous
// copies to the GPU.  A merged request that fails is retried entry by entry,
// so each entry's outcome is what it would have been alone.
#ifndef PHOENIX_GATHER_HPP
#define PHOENIX_GATHER_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <vector>

#include "phoenix/phoenix.hpp"

namespace phx {

namespace detail {
class Gatherer;
}  // namespace detail

/// One transfer of a gather (read) or scatter (write): @p size bytes between
/// @p file at @p file_offset and @p registration at @p reg_offset.  The file
/// and the registration must outlive the operation.
struct GatherEntry {
  File *file = nullptr;
  const Registration *registration = nullptr;
  std::size_t reg_offset = 0;
  std::uint64_t file_offset = 0;
  std::size_t size = 0;
};

/// The entry for device address @p device_address (inside @p registration).
/// Throws std::system_error(EINVAL) when [device_address, +size) is not.
[[nodiscard]] PHX_EXPORT GatherEntry entry_at(File &file, const Registration &registration,
                                              const void *device_address, std::size_t size,
                                              std::uint64_t file_offset);

/// Paged blocks: entry i moves file block @p file_blocks[i] (at
/// file_blocks[i] * block_size) to or from pool slot @p pool_slots[i] (at
/// pool_slots[i] * block_size of @p pool).  Throws std::system_error(EINVAL)
/// when the spans differ in length, block_size is 0, or a slot lies outside
/// the pool.
[[nodiscard]] PHX_EXPORT std::vector<GatherEntry> paged_blocks(
    File &file, const Registration &pool, std::size_t block_size,
    std::span<const std::uint64_t> file_blocks, std::span<const std::uint64_t> pool_slots);

struct GatherOptions {
  /// Largest request after merging; longer runs and entries are split
  /// (0: 1 MiB for direct and host, 256 KiB for compat).  Rounded up to 4 KiB.
  std::size_t max_request = 0;
  /// io_uring entries (0: PHX_QUEUE_DEPTH, default 128).
  unsigned queue_depth = 0;
  /// false: one request per entry (split only), to measure what merging buys.
  bool merge = true;
};

/// An entry that did not move all its bytes.
struct GatherFailure {
  std::size_t index = 0;  ///< position in the entries given
  int error = 0;          ///< the errno that stopped it; 0: a read that reached end of file
  std::size_t bytes = 0;  ///< bytes moved
};

struct GatherResult {
  std::size_t entries = 0;
  std::size_t requests = 0;  ///< requests issued after merging and splitting (retries included)
  std::size_t bytes = 0;     ///< bytes moved, all entries together
  std::vector<GatherFailure> failures;  ///< ascending by index
  [[nodiscard]] bool ok() const noexcept { return failures.empty(); }
};

/// Runs gathers and scatters for one open device.  Operations run one at a
/// time, in the order they were started, on a thread of this object
/// (started on first use); the synchronous calls wait for that thread.
/// Move-only; destruction waits for the operations already started.
class PHX_EXPORT Gather {
 public:
  /// Throws std::system_error: EINVAL for a malformed option, ENOTSUP when
  /// the device's engine lacks the gather capability (cufile; see
  /// EngineCapabilities).
  explicit Gather(const Device &device, GatherOptions options = {});
  Gather(Gather &&) noexcept;
  Gather &operator=(Gather &&) noexcept;
  Gather(const Gather &) = delete;
  Gather &operator=(const Gather &) = delete;
  ~Gather();

  /// The options in force (defaults resolved).  Throws EINVAL when moved from.
  [[nodiscard]] const GatherOptions &options() const;

  /// Sets up now what the first operation would otherwise set up (the
  /// thread, the io_uring and, for compat, the pinned staging, the stream
  /// and its events: tens of milliseconds), so that a server pays for it at
  /// start-up rather than on its first request.  Waits for the operations
  /// already started.  Throws std::system_error with what kept the set-up
  /// from succeeding (ENOTSUP: compat without CUDA; io_uring's errors;
  /// ENOMEM); EDEADLK from a callback of this Gather.
  void prepare();

  /// Reads every entry.  Per-entry failures are in the result; throws
  /// std::system_error only when the whole operation cannot run (EINVAL: an
  /// entry without file or registration, or outside its registration;
  /// EDEADLK when called from a callback of this Gather; ENOMEM; errors of
  /// io_uring_queue_init; CUDA failures for compat).
  [[nodiscard]] GatherResult read(std::span<const GatherEntry> entries);
  /// Writes every entry (offload).  Same rules.
  [[nodiscard]] GatherResult write(std::span<const GatherEntry> entries);

  /// As read()/write(), returning at once; the future holds the result or
  /// the exception.
  [[nodiscard]] std::future<GatherResult> read_async(std::vector<GatherEntry> entries);
  [[nodiscard]] std::future<GatherResult> write_async(std::vector<GatherEntry> entries);
  /// As read()/write(); @p done is called on the gather's thread with the
  /// result (an exception thrown by the operation reaches done as a result
  /// whose every entry failed with that errno).
  void read_async(std::vector<GatherEntry> entries, std::function<void(GatherResult)> done);
  void write_async(std::vector<GatherEntry> entries, std::function<void(GatherResult)> done);

  /// Stream-ordered: starts once the work enqueued on @p stream (a
  /// cudaStream_t; null is the legacy default stream) before the call is
  /// done, and the stream's later work waits for it.  *@p result is filled
  /// before the stream moves on and must stay valid until then.  Throws
  /// std::system_error: ENOTSUP without CUDA, EINVAL for a capturing stream.
  void read_on_stream(std::vector<GatherEntry> entries, GatherResult *result, CUstream_st *stream);
  void write_on_stream(std::vector<GatherEntry> entries, GatherResult *result, CUstream_st *stream);

 private:
  /// Throws std::system_error(EINVAL) on a moved-from Gather.
  [[nodiscard]] detail::Gatherer &impl() const;
  std::unique_ptr<detail::Gatherer> impl_;
};

}  // namespace phx

#endif  // PHOENIX_GATHER_HPP
