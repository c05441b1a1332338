// SPDX-License-Identifier: MIT
// The compat engine's data mover: threads that read file chunks into pinned
// staging buffers and copy them to the GPU with cuMemcpyHtoDAsync on their
// own streams (writes: the reverse), each thread keeping several chunks in
// flight so that file I/O and PCIe copies overlap.  Every transfer of every
// caller is cut into chunks whose boundaries are aligned to the file's
// O_DIRECT block, so parallel chunks never share a block.  Small transfers
// (under kSpreadBytes) run on the caller's thread through one of a few
// inline lanes when one is free: handing them to a worker and back costs
// two thread wake-ups, more than the copy itself.  Larger ones
// pay them too unless the workers and the caller find each other awake:
// both poll for spin_us before they sleep, so a caller reading in a loop
// (kvikio's 4 MiB cuFileRead tasks) finds the workers still polling; and
// the caller of a read does not wait idle for them: it takes pieces of its
// own job through an inline lane until none are left.  On a VM whose
// sleeping threads take hundreds of microseconds to wake, a 4 MiB read was
// otherwise done almost entirely by the first worker awake, one piece after
// another.
#ifndef PHOENIX_LIB_COPY_POOL_HPP
#define PHOENIX_LIB_COPY_POOL_HPP

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda/gpu.hpp"
#include "engines/compat/staging_pool.hpp"
#include "io/aligned_io.hpp"
#include "phoenix/phoenix.hpp"

namespace phx::detail {

struct CopyPoolConfig {
  std::size_t threads = 0;       ///< worker threads
  std::size_t chunk = 0;         ///< bytes per chunk (one pread/pwrite, one copy)
  std::size_t direct_chunk = 0;  ///< the same for O_DIRECT descriptors
  std::size_t depth = 0;         ///< chunks in flight per worker (staging buffers each)
  unsigned spin_us = 0;          ///< polling before a worker or a waiting caller sleeps
};

/// The copy_* fields of @p options (validated).
[[nodiscard]] CopyPoolConfig copy_pool_config(const Options &options) noexcept;

/// Smallest chunk a transfer is cut into to spread it over the workers.
inline constexpr std::size_t kMinSpreadChunk = std::size_t{256} << 10;

/// Bytes per chunk for a transfer of @p size whose file blocks are
/// @p block bytes: the configured chunk, or less where that would leave
/// workers idle.  A single 4 MiB read (one configured chunk) would
/// otherwise be one worker's pread and then its copy, one after the
/// other; cut into pieces of at least kMinSpreadChunk, several workers
/// read at once and each piece's copy overlaps the next one's read.
/// Always a multiple of @p block (O_DIRECT chunks never share a block)
/// and of the page (staging slots are page-sized).
[[nodiscard]] std::size_t chunk_for(std::size_t size, std::size_t block, std::size_t configured,
                                    std::size_t threads) noexcept;

/// Pieces of multi-piece transfers, by who moved them.
struct CopyPoolStats {
  std::uint64_t worker_pieces = 0;  ///< by the copy threads
  std::uint64_t caller_pieces = 0;  ///< by the reading caller itself (CopyPool::help)
};

class CopyPool {
 public:
  /// Allocates all staging memory (threads x depth x chunk, pinned) and
  /// starts the workers.  Throws std::system_error.
  CopyPool(std::shared_ptr<const cuda::Gpu> gpu, CopyPoolConfig config);
  ~CopyPool();
  CopyPool(const CopyPool &) = delete;
  CopyPool &operator=(const CopyPool &) = delete;
  CopyPool(CopyPool &&) = delete;
  CopyPool &operator=(CopyPool &&) = delete;

  [[nodiscard]] const CopyPoolConfig &config() const noexcept { return config_; }
  [[nodiscard]] CopyPoolStats stats() const noexcept {
    return {worker_pieces_.load(std::memory_order_relaxed),
            caller_pieces_.load(std::memory_order_relaxed)};
  }

  /// Moves @p size bytes between @p fd at @p file_offset and device memory at
  /// @p device.  Blocks until done.  Reads stop early only at end of file.
  [[nodiscard]] TransferResult run(Direction dir, int fd, std::uintptr_t device, std::size_t size,
                                   std::uint64_t file_offset, const IoPolicy &policy) noexcept;

  struct Job;

  /// An inline lane's buffer; lanes in the pool.
  static constexpr std::size_t kInlineBytes = std::size_t{1} << 20;
  /// Transfers from this size up are cut into pieces (the caller moving its
  /// share through a lane); smaller ones run on a lane when one is free.
  /// A 1 MiB read on one thread was bound by one page-cache copy (3.9 GB/s
  /// on the H200 machine, kvikio's compat mode 3.7).
  static constexpr std::size_t kSpreadBytes = 2 * kMinSpreadChunk;
  static constexpr std::size_t kInlineLanes = 4;

 private:
  struct Lane {
    PinnedBuffer buffer;
    cuda::CUstream stream = nullptr;
    cuda::CUevent event = nullptr;
  };
  [[nodiscard]] Lane *take_lane() noexcept;
  void give_lane(Lane *lane) noexcept;
  [[nodiscard]] TransferResult run_inline(Lane &lane, Direction dir, int fd, std::uintptr_t device,
                                          std::size_t size, std::uint64_t file_offset,
                                          const IoPolicy &policy) noexcept;

  struct Task {
    Job *job = nullptr;
    std::size_t index = 0;
  };
  void worker(std::size_t worker_index, cuda::CUstream stream,
              std::vector<cuda::CUevent> events) noexcept;

  // Staging pinned by one thread, from the first job the workers take on,
  // in the order they first need it: every worker's first slot, then every
  // worker's second.  cuMemHostAlloc runs at about 2.7 GB/s on an H200 host
  // and the driver serialises it: twelve workers pinning their own slots at
  // once took longer in all (52 ms for 96 MiB) than one thread pinning them
  // one after another (36 ms), and none could be sure of its first slot
  // before the others'.  In order, the first worker starts after one slot
  // is pinned and the rest join as theirs arrive.
  void pin_ahead() noexcept;
  /// Worker @p worker's slot @p slot, once pin_ahead() has reached it; an
  /// empty buffer when pinning failed or the pool stops (the worker then
  /// pins its own, and reports that failure).
  [[nodiscard]] PinnedBuffer take_pinned(std::size_t worker, std::size_t slot) noexcept;
  enum class PinState { ready, pending, never };
  /// take_pinned() without waiting: ready (@p out holds the buffer),
  /// pending (not pinned yet) or never (pinning failed, stopped, or never
  /// reaches this slot).
  [[nodiscard]] PinState poll_pinned(std::size_t worker, std::size_t slot,
                                     PinnedBuffer &out) noexcept;
  bool take(Task &task, bool wait);
  /// The next unstarted piece of @p job, taken off the queue; false if none.
  [[nodiscard]] bool claim(Job &job, std::size_t &index) noexcept;
  /// The caller's share of its own read: pieces of @p job through @p lane.
  void help(Job &job, Lane &lane) noexcept;
  /// Polls up to config_.spin_us for queued work or a stop; true if seen.
  [[nodiscard]] bool spin_for_work() const noexcept;

  std::shared_ptr<const cuda::Gpu> gpu_;
  CopyPoolConfig config_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<Job *> queue_;
  bool stop_ = false;
  // Mirrors !queue_.empty() || stop_ for polling without the mutex.
  std::atomic<bool> wanted_{false};
  std::atomic<std::uint64_t> worker_pieces_{0};
  std::atomic<std::uint64_t> caller_pieces_{0};
  std::vector<std::thread> threads_;
  std::vector<Lane> lanes_;
  std::mutex lanes_mutex_;
  std::vector<Lane *> free_lanes_;

  std::mutex pinned_mutex_;
  std::condition_variable pinned_ready_;
  std::vector<PinnedBuffer> pinned_;  // slot * threads + worker
  std::size_t pinned_count_ = 0;      // pinned_[0, pinned_count_) are done
  bool pin_failed_ = false;
  bool pin_stop_ = false;
  // Detached, so that a pool kept for the process (shared_engines.hpp)
  // holds no finished, unjoined thread; the destructor waits for it to
  // say it is done instead.
  bool pinner_running_ = false;
  std::once_flag pinner_once_;
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_COPY_POOL_HPP
