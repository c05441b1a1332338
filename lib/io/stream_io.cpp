// SPDX-License-Identifier: MIT
#include "io/stream_io.hpp"

#include <atomic>

#include "io/stream_io_testing.hpp"
#include "phoenix/config.h"

namespace phx::detail {
namespace {

// The test seam (stream_io_testing.hpp).  Read once per op, when it is
// submitted, so an op is either ordered or not from start to end.
std::atomic<bool> ignore_stream_order{false};
std::atomic<std::size_t> live_workers{0};
std::atomic<std::size_t> lane_helpers{0};

}  // namespace

namespace testing {

void set_ignore_stream_order(bool ignore) noexcept {
  ignore_stream_order.store(ignore, std::memory_order_relaxed);
}

std::size_t live_stream_workers() noexcept {
  return live_workers.load(std::memory_order_acquire);
}

std::size_t stream_lane_helpers() noexcept {
  return lane_helpers.load(std::memory_order_acquire);
}

}  // namespace testing
}  // namespace phx::detail

#if PHX_WITH_CUDA

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/device_state.hpp"
#include "core/error.hpp"
#include "cuda/driver_api.hpp"
#include "cuda/gpu.hpp"
#include "engines/compat/staging_pool.hpp"

namespace phx::detail {
namespace {

using cuda::CUcontext;
using cuda::CUevent;

// A pinned staging buffer for staged stream I/O, with two flags: "ready"
// (written by the I/O thread, waited on by the stream) and "done" (written
// by the stream after its copy, polled by the I/O thread).  Both only grow,
// so a slot moves between operations without resetting them.
struct StagingSlot {
  PinnedBuffer buffer;
  std::uint32_t *ready = nullptr;
  std::uint32_t *done = nullptr;
};

// How far the submitting thread got with an op's stream operations.
enum Chain : int {
  kIssuing = 0,    // still enqueueing them
  kComplete = 1,   // all in the stream, the tail event last
  kAbandoned = 2,  // a CUDA call failed part way: the worker stops waiting for the stream
};

// Stream-ordered writes submitted in this process and not yet destroyed.
// While there are none, no stream's earlier work can change a file, so a
// compat read may read its file before its stream gets there: only the copy
// into device memory has to wait, and that is in the stream already.
std::atomic<std::size_t> pending_writes{0};

// Where the pending stream-ordered writes end, per file.  A staged read
// sizes its copies when it is submitted, before the writes ahead of it in
// its stream have reached the file: sized by the file as it was then, a
// read right behind a write that grows the file came back short (3 runs in
// 60 of the libphxfile client test).  The file is taken to reach at least
// as far as the writes still pending on it.
struct FileKey {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator<(const FileKey &other) const noexcept {
    return std::tie(device, inode) < std::tie(other.device, other.inode);
  }
};

class PendingWriteEnds {
 public:
  void add(const FileKey &key, std::uint64_t end) {
    const std::lock_guard lock(mutex_);
    ends_[key].insert(end);
  }
  void remove(const FileKey &key, std::uint64_t end) noexcept {
    const std::lock_guard lock(mutex_);
    const auto it = ends_.find(key);
    if (it == ends_.end()) {
      return;
    }
    if (const auto at = it->second.find(end); at != it->second.end()) {
      it->second.erase(at);
    }
    if (it->second.empty()) {
      ends_.erase(it);
    }
  }
  // The furthest end of the writes pending on @p key; 0 when none.
  [[nodiscard]] std::uint64_t furthest(const FileKey &key) const {
    const std::lock_guard lock(mutex_);
    const auto it = ends_.find(key);
    return it == ends_.end() ? 0 : *it->second.rbegin();
  }

 private:
  mutable std::mutex mutex_;
  std::map<FileKey, std::multiset<std::uint64_t>> ends_;
};

PendingWriteEnds &pending_write_ends() {
  static PendingWriteEnds ends;
  return ends;
}

// One in-flight stream-ordered I/O.
struct Op {
  Op() = default;
  Op(const Op &) = delete;
  Op &operator=(const Op &) = delete;
  Op(Op &&) = delete;
  Op &operator=(Op &&) = delete;
  ~Op() {
    if (write_end) {
      pending_write_ends().remove(write_file, *write_end);
    }
    if (counted_write) {
      pending_writes.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  bool counted_write = false;  // counted in pending_writes
  FileKey write_file;          // a write's file and end, while in pending_write_ends
  std::optional<std::uint64_t> write_end;
  StreamRequest request;
  CUcontext context = nullptr;
  CUevent event = nullptr;  // prior stream work; null: nothing to wait for
  // Recorded after the op's last stream operation: once it completes the
  // stream no longer reads the op's flags (see Core::~Core).
  CUevent tail = nullptr;
  std::uint32_t *flag = nullptr;
  std::uint32_t value = 0;
  bool ignore_order = false;  // the test seam, as it was at submit
  // Staged (compat): the copies are in the stream, the I/O thread only
  // reads and writes files and flags.
  bool staged = false;
  std::atomic<int> chain{kIssuing};
  std::size_t chunk = 0;
  std::uint64_t base = 0;
  std::size_t length = 0;
  std::size_t count = 0;
  std::vector<std::unique_ptr<StagingSlot>> slots;
  std::vector<std::uint32_t> ready_base;
  std::vector<std::uint32_t> done_base;
  // A staged read's worker saw every "done" write, the last of the op's
  // stream operations: the stream no longer reads its flags, no tail needed.
  bool stream_passed = false;
  std::vector<std::uint32_t> uses;  // chunks each slot carried

  void range(std::size_t i, std::uint64_t &offset, std::size_t &size) const noexcept {
    const std::uint64_t start = i == 0 ? request.file_offset : base + i * chunk;
    const std::uint64_t stop =
        std::min<std::uint64_t>(request.file_offset + length, base + (i + 1) * chunk);
    offset = start;
    size = static_cast<std::size_t>(stop - start);
  }
  void set_chain(Chain state) noexcept {
    chain.store(state, std::memory_order_release);
    chain.notify_all();
  }
};

std::uint32_t load(const std::uint32_t *flag) noexcept {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): atomic_ref needs a non-const object
  return std::atomic_ref<std::uint32_t>(*const_cast<std::uint32_t *>(flag))
      .load(std::memory_order_acquire);
}

void store(std::uint32_t *flag, std::uint32_t value) noexcept {
  // seq_cst (a locked xchg on x86) also drains the store buffer, so the GPU
  // polling this host-mapped word sees it promptly; and, unlike a separate
  // fence, ThreadSanitizer understands it.
  std::atomic_ref<std::uint32_t>(*flag).store(value, std::memory_order_seq_cst);
}

// Waits until *flag >= target (wrapping compare, as CU_STREAM_WAIT_VALUE_GEQ);
// false when @p chain says the op was abandoned first.
bool wait_at_least(const std::uint32_t *flag, std::uint32_t target,
                   const std::atomic<int> *chain = nullptr) noexcept {
  for (unsigned spins = 0; static_cast<std::int32_t>(load(flag) - target) < 0; ++spins) {
    if (chain != nullptr && chain->load(std::memory_order_acquire) == kAbandoned) {
      return false;
    }
    if (spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return true;
}

// Whether the stream wrote the "done" flag of every chunk of @p op the I/O
// thread read (its last stream operations for the op).
bool stream_done(const Op &op) noexcept {
  for (std::size_t s = 0; s < op.slots.size(); ++s) {
    if (static_cast<std::int32_t>(load(op.slots[s]->done) - (op.done_base[s] + op.uses[s])) < 0) {
      return false;
    }
  }
  return true;
}

// Waits for stream_done(@p op); false when its chain was cut short first.
bool wait_stream_done(Op &op) noexcept {
  for (std::size_t s = 0; s < op.slots.size(); ++s) {
    if (!wait_at_least(op.slots[s]->done, op.done_base[s] + op.uses[s], &op.chain)) {
      return false;
    }
  }
  op.chain.wait(kIssuing, std::memory_order_acquire);
  return true;
}

// Fallback when the driver refuses stream memory operations: the paper's
// way, a host function that holds the stream until the flag is set.
struct HostWait {
  std::uint32_t *flag;
  std::uint32_t value;
};
void wait_flag(void *arg) {
  std::unique_ptr<HostWait> w(static_cast<HostWait *>(arg));
  std::atomic_ref<std::uint32_t> flag(*w->flag);
  while (static_cast<std::int32_t>(flag.load(std::memory_order_acquire) - w->value) < 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// The smallest staging slot.  An op smaller than a chunk takes a slot of
// the next power of two from here up, not a whole chunk: 4 KiB O_DIRECT
// reads each held a 16 MiB slot, so the default 256 MiB budget let only 16
// of them be in flight and a batch's submitter waited for slots (issue 26).
// Powers of two, so that ops of similar sizes reuse each other's slots.
constexpr std::size_t kMinSlot = std::size_t{64} << 10;

// The slot for an op spanning @p span bytes from its first aligned block,
// given the chunk (a multiple of @p block) it would otherwise use.
std::size_t slot_size(std::size_t span, std::size_t chunk, std::size_t block) noexcept {
  if (span >= chunk) {
    return chunk;
  }
  const std::size_t size = std::bit_ceil(std::max(span, kMinSlot));
  return std::min(chunk, (size + block - 1) / block * block);
}

// How often an idle worker (or a submitter waiting for staging) looks at
// the reads waiting for their streams, and how many it looks at each time.
constexpr auto kReapPoll = std::chrono::microseconds(20);
// An idle worker (or a waiting submitter) that finds nothing finished
// looks half as often each time, down to this: a stream held up for long (a
// long kernel before its copies, a wait on an event recorded late) then
// costs a thousand wake-ups a second, not fifty thousand.  A read deferred
// meanwhile starts the worker's over.
constexpr auto kReapPollMax = std::chrono::microseconds(1000);
constexpr std::size_t kReapBatch = 64;
// How long a closing device waits for its streams to pass their last waits
// on its flags before it leaves the flags allocated instead.
constexpr auto kTailWait = std::chrono::seconds(2);

}  // namespace

// The state shared by a StreamIo and its workers.  Workers hold it by
// shared_ptr, so a worker that ends up destroying the StreamIo (it dropped
// the device's last reference) still has it while it leaves its loop.
struct StreamIo::Core {
  Core(int device, const StreamLimits &bounds) noexcept : device_id(device), limits(bounds) {}
  ~Core();
  Core(const Core &) = delete;
  Core &operator=(const Core &) = delete;
  Core(Core &&) = delete;
  Core &operator=(Core &&) = delete;

  void submit(const std::shared_ptr<Core> &self, StreamRequest request, CUstream_st *stream);
  void stop_and_join() noexcept;
  [[nodiscard]] StreamIoStats stats() const;

 private:
  void submit_inside(const std::shared_ptr<Core> &self, StreamRequest request, CUstream_st *stream);
  CUcontext device_context();
  std::uint32_t *take_flag();
  void give_flag(std::uint32_t *flag) noexcept;
  CUevent take_event(CUcontext context);
  void give_event(CUcontext context, CUevent event) noexcept;
  void retire_tail(CUcontext context, CUevent tail) noexcept;
  void spawn_locked(const std::shared_ptr<Core> &self);
  void ensure_worker(const std::shared_ptr<Core> &self);
  void enqueue(const std::shared_ptr<Core> &self, std::shared_ptr<Op> op) noexcept;
  void worker() noexcept;
  bool run(Op &op) noexcept;
  bool run_staged(Op &op, bool current) noexcept;
  void finish(Op &op) noexcept;
  void retire(Op &op, bool passed) noexcept;
  std::size_t reap() noexcept;
  bool enqueue_staged(const std::shared_ptr<Core> &self, const std::shared_ptr<Op> &keep,
                      CUstream_st *stream);
  std::vector<std::unique_ptr<StagingSlot>> take_slots(std::size_t k, std::size_t size);
  void give_slots(std::vector<std::unique_ptr<StagingSlot>> &slots) noexcept;
  void leak_slots(std::vector<std::unique_ptr<StagingSlot>> &slots) noexcept;
  void free_slot_locked(std::unique_ptr<StagingSlot> slot,
                        std::vector<PinnedBuffer> &buffers) noexcept;

  static constexpr std::size_t kFlagsPerBlock = 1024;

  const int device_id;
  const StreamLimits limits;

  mutable std::mutex mutex;
  // Declared first so that it goes last: the pools are freed in its context.
  std::unique_ptr<cuda::Gpu> gpu;
  bool gpu_looked_up = false;
  std::vector<void *> flag_blocks;
  std::vector<std::uint32_t *> free_flags;
  // Set when a stream may still wait on our flags at the end (a chain cut
  // short, a tail event that could not be recorded): they are not freed.
  bool keep_flags = false;
  std::map<CUcontext, std::vector<CUevent>> free_events;
  std::deque<std::pair<CUcontext, CUevent>> tails;  // recorded, maybe not yet reached

  // Workers.  The queue is unbounded: a queued op costs an Op, an event and
  // a flag, and its submitter already waited for any staging it needs.
  std::condition_variable work;
  std::deque<std::shared_ptr<Op>> queue;
  std::vector<std::thread> threads;
  std::size_t idle = 0;     // workers waiting for work
  std::size_t running = 0;  // ops taken by a worker and not finished
  // Staged reads whose files are read, waiting for their streams to copy
  // the slots out; their workers moved on (see reap).  One idle worker
  // polls them.
  std::deque<std::shared_ptr<Op>> retiring;
  bool polling = false;
  std::chrono::microseconds reap_wait = kReapPoll;  // the polling worker's next wait
  std::size_t reap_polls = 0;
  bool stop = false;
  // An idle worker gives staging back with cuMemFreeHost, which waits for
  // the work in every stream of the device (an implicit synchronisation).
  // No stream may wait for one of our flags meanwhile, or neither returns:
  // a worker trims only when no op is in flight and no submitter is inside,
  // and submitters wait at the door until it is done.
  bool trimming = false;
  std::size_t submitting = 0;  // threads inside submit()
  std::condition_variable trim_over;
  std::size_t threads_created = 0;
  std::size_t threads_live = 0;

  // Staging: `held` bytes of slots exist (in use or in `free_slots`), never
  // more than the budget.  Submitters wait in ticket order, so a large op
  // is not starved by small ones.
  std::condition_variable staging_changed;
  std::vector<std::unique_ptr<StagingSlot>> free_slots;
  std::size_t held = 0;
  std::size_t free_bytes = 0;
  std::size_t peak = 0;
  std::size_t waits = 0;
  std::size_t staging_wait_polls = 0;
  std::size_t leaked = 0;
  std::uint64_t next_ticket = 0;
  std::uint64_t serving = 0;
};

StreamIo::Core::~Core() {
  // Every op is finished: no worker runs, no submitter is inside.
  const cuda::Driver *d = cuda::driver();
  if (d == nullptr) {
    return;
  }
  // A stream passes its last wait on our flags at the op's tail event.  The
  // flags are freed only once every tail is reached; the events once theirs is.
  const auto deadline = std::chrono::steady_clock::now() + kTailWait;
  for (const auto &[context, tail] : tails) {
    bool reached = false;
    try {
      const cuda::ScopedContext scope(context);
      for (;;) {
        const cuda::CUresult r = d->EventQuery(tail);
        if (r != cuda::kErrorNotReady) {
          reached = r == cuda::kSuccess;
          break;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    } catch (...) {
    }
    if (reached) {
      free_events[context].push_back(tail);
    } else {
      keep_flags = true;  // the event is left alone too
    }
  }
  for (const auto &[context, events] : free_events) {
    try {
      const cuda::ScopedContext scope(context);
      for (CUevent e : events) {
        (void)d->EventDestroy(e);
      }
    } catch (...) {
      // The context is gone, and its events with it.
    }
  }
  if (!keep_flags && !flag_blocks.empty()) {
    try {
      const cuda::ScopedContext scope(gpu ? gpu->context() : cuda::any_context());
      for (void *block : flag_blocks) {
        (void)d->MemFreeHost(block);
      }
    } catch (...) {
    }
  }
  // free_slots, then gpu, go with the members.
}

CUcontext StreamIo::Core::device_context() {
  const std::lock_guard lock(mutex);
  if (!gpu_looked_up) {
    std::string why;
    if (cuda::gpu_for_device(device_id, why)) {
      gpu = std::make_unique<cuda::Gpu>(device_id);
    }
    gpu_looked_up = true;
  }
  return gpu ? gpu->context() : nullptr;
}

std::uint32_t *StreamIo::Core::take_flag() {
  const std::lock_guard lock(mutex);
  if (free_flags.empty()) {
    // Portable, device-mapped pinned memory: every context's streams can wait on it.
    void *block = nullptr;
    cuda::check(
        cuda::driver()->MemHostAlloc(&block, kFlagsPerBlock * sizeof(std::uint32_t),
                                     cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap),
        "cuMemHostAlloc(flags)");
    flag_blocks.push_back(block);
    auto *flags = static_cast<std::uint32_t *>(block);
    for (std::size_t i = 0; i < kFlagsPerBlock; ++i) {
      flags[i] = 0;
      free_flags.push_back(flags + i);
    }
  }
  std::uint32_t *flag = free_flags.back();
  free_flags.pop_back();
  return flag;
}

void StreamIo::Core::give_flag(std::uint32_t *flag) noexcept {
  const std::lock_guard lock(mutex);
  try {
    free_flags.push_back(flag);
  } catch (...) {
    // The flag is lost to the pool; its block is still freed with it.
  }
}

CUevent StreamIo::Core::take_event(CUcontext context) {
  {
    const std::lock_guard lock(mutex);
    auto &pool = free_events[context];
    if (!pool.empty()) {
      CUevent e = pool.back();
      pool.pop_back();
      return e;
    }
  }
  CUevent e = nullptr;
  // Blocking sync: the I/O thread sleeps instead of spinning on a core
  // that the I/O itself needs.
  cuda::check(cuda::driver()->EventCreate(&e, cuda::kEventBlockingSync | cuda::kEventDisableTiming),
              "cuEventCreate");
  return e;
}

void StreamIo::Core::give_event(CUcontext context, CUevent event) noexcept {
  const std::lock_guard lock(mutex);
  try {
    free_events[context].push_back(event);
  } catch (...) {
    (void)cuda::driver()->EventDestroy(event);
  }
}

// Keeps @p tail until its stream passes it, and takes back the oldest
// tails already passed: the list stays about as long as the ops in flight.
void StreamIo::Core::retire_tail(CUcontext context, CUevent tail) noexcept {
  const cuda::Driver &d = *cuda::driver();
  const std::lock_guard lock(mutex);
  try {
    tails.emplace_back(context, tail);
  } catch (...) {
    keep_flags = true;  // leaves the event unqueried: nothing is freed under the stream
    return;
  }
  // The worker's current context is the op's; query only that context's events.
  for (int n = 0; n < 4 && !tails.empty() && tails.front().first == context; ++n) {
    if (d.EventQuery(tails.front().second) != cuda::kSuccess) {
      break;
    }
    try {
      free_events[context].push_back(tails.front().second);
    } catch (...) {
      (void)d.EventDestroy(tails.front().second);
    }
    tails.pop_front();
  }
}

// Starts one more worker.  Caller holds the mutex.
void StreamIo::Core::spawn_locked(const std::shared_ptr<Core> &self) {
  threads.emplace_back([core = self]() mutable {
    core->worker();
    core.reset();  // may free the pools: before the count says this worker is gone
    live_workers.fetch_sub(1, std::memory_order_release);
  });
  ++threads_created;
  ++threads_live;
  live_workers.fetch_add(1, std::memory_order_relaxed);
}

// The first worker is made before anything is put in a stream: then an op
// whose waits are in a stream always has a worker to run it.
void StreamIo::Core::ensure_worker(const std::shared_ptr<Core> &self) {
  const std::lock_guard lock(mutex);
  if (threads.empty()) {
    spawn_locked(self);
  }
}

// Deadlock freedom with a bounded pool.  A worker can block on its op for
// as long as the work before the op in its stream takes (EventSynchronize,
// polling "done" flags), and that work can include other stream-ordered
// ops' waits.  Those ops were submitted earlier: the stream's work before
// an op is fixed when the op is submitted (an event or a wait captures the
// state at call time), and the op is queued before its submit returns.
// The queue is first in, first out, so every op a worker is blocked on is
// older than its own; the oldest unfinished op depends on no unfinished op
// and runs on a worker as soon as one is free, which needs only one worker.
// So at most `workers` threads, and ops beyond them wait in the queue.
// What this cannot cover: a stream made to wait, through host code, for a
// stream-ordered I/O submitted after the stream's own (documented).
// noexcept: the stream may already wait on the op, so failing to queue it
// would hang the stream; running out of memory here ends the process.
void StreamIo::Core::enqueue(const std::shared_ptr<Core> &self, std::shared_ptr<Op> op) noexcept {
  {
    const std::lock_guard lock(mutex);
    queue.push_back(std::move(op));
    // More queued ops than idle workers to take them: one more worker.
    if (queue.size() > idle && threads.size() < limits.workers) {
      try {
        spawn_locked(self);
      } catch (...) {
        // The workers there are (ensure_worker made one) take it in turn.
      }
    }
  }
  work.notify_one();
}

void StreamIo::Core::worker() noexcept {
  for (;;) {
    std::shared_ptr<Op> op;
    {
      std::unique_lock lock(mutex);
      ++idle;
      while (queue.empty() && (!stop || !retiring.empty())) {
        if (!retiring.empty() && !polling) {
          polling = true;
          ++reap_polls;
          lock.unlock();
          const std::size_t reaped = reap();
          lock.lock();
          if (reaped == 0 && queue.empty()) {
            const auto wait = reap_wait;
            reap_wait = std::min(reap_wait * 2, kReapPollMax);
            work.wait_for(lock, wait);
          } else {
            reap_wait = kReapPoll;
          }
          polling = false;
          if (stop) {
            work.notify_all();  // workers that left the polling to this one
          }
        } else if (free_slots.empty() || running > 0 || !retiring.empty()) {
          work.wait(lock);
        } else if (work.wait_for(lock, limits.idle_trim) == std::cv_status::timeout &&
                   queue.empty() && !stop && running == 0 && retiring.empty() && submitting == 0) {
          // Nothing ran for a while: give the idle staging back (see trimming).
          trimming = true;
          std::vector<PinnedBuffer> buffers;
          while (!free_slots.empty()) {
            std::unique_ptr<StagingSlot> slot = std::move(free_slots.back());
            free_slots.pop_back();
            free_bytes -= slot->buffer.size();
            free_slot_locked(std::move(slot), buffers);
          }
          lock.unlock();
          buffers.clear();  // cuMemFreeHost, outside the lock
          lock.lock();
          trimming = false;
          trim_over.notify_all();
        }
      }
      --idle;
      if (queue.empty()) {
        break;  // stopping, and every op is done
      }
      op = std::move(queue.front());
      queue.pop_front();
      ++running;
    }
    bool deferred = run(*op);
    bool wake_poller = false;
    {
      const std::lock_guard lock(mutex);
      --running;
      if (deferred) {
        try {
          retiring.push_back(op);
          wake_poller = reap_wait > kReapPoll;
          reap_wait = kReapPoll;
        } catch (...) {
          deferred = false;  // out of memory: this worker waits for the stream instead
        }
      }
    }
    if (wake_poller) {
      work.notify_all();  // the polling worker, asleep for up to kReapPollMax
    }
    if (deferred) {
      op.reset();
    } else {
      if (op->staged && !op->slots.empty()) {
        const bool passed = wait_stream_done(*op);
        retire(*op, passed);
      }
      finish(*op);
    }
    (void)reap();  // others' slots too, while every worker may be busy
    // Last: this may drop the device's last reference, and so destroy the
    // StreamIo on this thread (it then detaches this thread, which leaves
    // the loop at once; `this` lives on through the thread's reference).
    op.reset();
  }
  const std::lock_guard lock(mutex);
  --threads_live;
}

// Returns true when the op is left to reap() (a staged read whose stream
// has not copied it all out yet).
bool StreamIo::Core::run(Op &op) noexcept {
  const cuda::Driver &d = *cuda::driver();
  const bool current = d.CtxSetCurrent(op.context) == cuda::kSuccess;
  if (op.staged) {
    return run_staged(op, current);
  }
  StreamRequest &r = op.request;
  ssize_t result = -EIO;
  if (current && (op.event == nullptr || d.EventSynchronize(op.event) == cuda::kSuccess)) {
    const TransferResult t = r.device->backend().transfer(r.dir, r.fd, *r.mapping, r.mapping_offset,
                                                          r.size, r.file_offset, r.policy);
    result =
        t.error != 0 && t.done == 0 ? -static_cast<ssize_t>(t.error) : static_cast<ssize_t>(t.done);
  }
  if (r.bytes_done != nullptr) {
    *r.bytes_done = result;
  }
  if (op.event != nullptr) {
    give_event(op.context, op.event);
  }
  // Release the stream: bytes_done is visible before the flag (seq_cst, as
  // in store()).  The flag can serve the next op at once: it only grows.
  store(op.flag, op.value);
  give_flag(op.flag);
  return false;
}

namespace {

// One staged read's chunks read by several threads at once (StreamLimits::
// lanes).  Chunk i goes through slot i % k and slot s belongs to lane
// s % lanes, so each slot's chunks stay in order on one thread, and a lane
// waits only for the stream to copy its own slots' earlier chunks out:
// that needs earlier chunks alone, never a later one, so no lane waits on
// another's future work.  A chunk fails or comes back short: the chunks
// after it read nothing once that is known (one already read is copied as
// read, inside the range asked for), and bytes_done counts up to it, as when
// one thread reads them in order.  The lane with the last chunk waits until
// every other chunk is read, so bytes_done is whole before the stream can
// pass.
class LaneRead {
 public:
  LaneRead(Op &op, bool io_failed, std::vector<std::uint32_t> &uses)
      : op_(op),
        io_failed_(io_failed),
        uses_(uses),
        moved_(op.count, 0),
        errors_(op.count, 0),
        cut_(op.count, 0),
        first_cut_(op.count) {}

  // Runs @p lanes lanes (this thread and lanes - 1 more, fewer when a thread
  // cannot be made); false when the op's chain was cut short first.
  bool run(std::size_t lanes) noexcept {
    std::vector<std::thread> helpers;
    helpers.reserve(lanes - 1);
    for (std::size_t l = 1; l < lanes; ++l) {
      try {
        helpers.emplace_back([this, l] {
          lanes_.wait(0, std::memory_order_acquire);
          if (l < lanes_.load(std::memory_order_acquire)) {
            lane_helpers.fetch_add(1, std::memory_order_relaxed);
            lane(l);
          }
        });
      } catch (...) {
        break;  // no thread: the lanes made so far share the chunks
      }
    }
    lanes_.store(helpers.size() + 1, std::memory_order_release);
    lanes_.notify_all();
    lane(0);
    for (std::thread &t : helpers) {
      t.join();
    }
    return !gave_up_.load(std::memory_order_acquire);
  }

 private:
  void lane(std::size_t l) noexcept {
    const std::size_t k = op_.slots.size();
    const std::size_t lanes = lanes_.load(std::memory_order_acquire);
    const StreamRequest &r = op_.request;
    for (std::size_t i = 0; i < op_.count; ++i) {
      const std::size_t s = i % k;
      if (s % lanes != l) {
        continue;
      }
      const auto j = static_cast<std::uint32_t>(i / k);
      StagingSlot &slot = *op_.slots[s];
      if (gave_up_.load(std::memory_order_acquire) ||
          !wait_at_least(slot.done, op_.done_base[s] + j, &op_.chain)) {
        give_up();
        return;
      }
      std::uint64_t offset = 0;
      std::size_t size = 0;
      op_.range(i, offset, size);
      std::size_t moved = 0;
      if (!io_failed_ && i < first_cut_.load(std::memory_order_acquire)) {
        const TransferResult t = transfer(r.dir, r.fd, slot.buffer.data(), size, offset, r.policy);
        moved = std::min(t.done, size);
        moved_[i] = t.done;
        if (t.error != 0 || t.done < size) {
          errors_[i] = t.error;
          cut_[i] = 1;
          cut_at(i);
        }
      }
      if (moved < size) {
        std::memset(static_cast<std::byte *>(slot.buffer.data()) + moved, 0, size - moved);
      }
      if (i + 1 == op_.count) {
        for (std::size_t seen = read_.load(std::memory_order_acquire); seen + 1 < op_.count;
             seen = read_.load(std::memory_order_acquire)) {
          read_.wait(seen, std::memory_order_acquire);
        }
        if (gave_up_.load(std::memory_order_acquire)) {
          return;
        }
        if (r.bytes_done != nullptr) {
          report();
        }
      }
      store(slot.ready, op_.ready_base[s] + j + 1);
      uses_[s] = j + 1;
      if (i + 1 != op_.count) {
        read_.fetch_add(1, std::memory_order_acq_rel);
        read_.notify_all();
      }
    }
  }

  // Stops every lane: the others at their next chunk or wait, the last
  // chunk's lane (which counts the chunks read) at once.
  void give_up() noexcept {
    gave_up_.store(true, std::memory_order_release);
    read_.fetch_add(op_.count, std::memory_order_acq_rel);
    read_.notify_all();
  }

  // The first chunk that failed or came back short so far.
  void cut_at(std::size_t i) noexcept {
    std::size_t seen = first_cut_.load(std::memory_order_acquire);
    while (i < seen && !first_cut_.compare_exchange_weak(seen, i, std::memory_order_acq_rel)) {
      // seen now holds the value another lane put there: try again if still later
    }
  }

  // bytes_done, as one thread reading the chunks in order would say it.
  void report() noexcept {
    int error = io_failed_ ? EIO : 0;
    std::size_t total = 0;
    for (std::size_t i = 0; i < op_.count && !io_failed_; ++i) {
      total += moved_[i];
      if (cut_[i] != 0) {
        error = errors_[i];  // 0 for a short read: the file ended
        break;
      }
    }
    op_.chain.wait(kIssuing, std::memory_order_acquire);
    if (op_.chain.load(std::memory_order_acquire) == kAbandoned) {
      error = EIO;
      total = 0;
    }
    *op_.request.bytes_done =
        error != 0 && total == 0 ? -static_cast<ssize_t>(error) : static_cast<ssize_t>(total);
  }

  Op &op_;
  const bool io_failed_;
  std::vector<std::uint32_t> &uses_;  // each slot's element written by its own lane
  std::vector<std::size_t> moved_;    // each chunk's elements written by its lane,
  std::vector<int> errors_;           // read by the last chunk's lane once read_
  std::vector<char> cut_;             // counts every other chunk
  std::atomic<std::size_t> first_cut_;
  std::atomic<std::size_t> read_{0};
  std::atomic<std::size_t> lanes_{0};
  std::atomic<bool> gave_up_{false};
};

}  // namespace

bool StreamIo::Core::run_staged(Op &op, bool current) noexcept {
  const cuda::Driver &d = *cuda::driver();
  StreamRequest &r = op.request;
  const std::size_t k = op.slots.size();
  int error = 0;
  bool stop_io = false;
  std::size_t total = 0;
  if (op.event != nullptr && (!current || d.EventSynchronize(op.event) != cuda::kSuccess)) {
    error = EIO;
    stop_io = true;
  }
  bool gave_up = false;
  std::vector<std::uint32_t> uses(k, 0);
  const std::size_t lanes = std::min(limits.lanes, k);
  const bool in_lanes = r.dir == Direction::read && lanes > 1 && op.count > 1;
  if (in_lanes) {
    gave_up = !LaneRead(op, stop_io, uses).run(lanes);
  }
  for (std::size_t i = 0; i < op.count && !gave_up && !in_lanes; ++i) {
    const std::size_t s = i % k;
    const auto j = static_cast<std::uint32_t>(i / k);
    StagingSlot &slot = *op.slots[s];
    std::uint64_t offset = 0;
    std::size_t size = 0;
    op.range(i, offset, size);
    // Reads wait until the stream copied the slot's previous chunk out;
    // writes until it copied this chunk in.
    const bool reading = r.dir == Direction::read;
    if ((reading || !op.ignore_order) &&
        !wait_at_least(slot.done, op.done_base[s] + j + (reading ? 0 : 1), &op.chain)) {
      gave_up = true;
      break;
    }
    std::size_t moved = 0;
    if (!stop_io) {
      const TransferResult t = transfer(r.dir, r.fd, slot.buffer.data(), size, offset, r.policy);
      moved = std::min(t.done, size);
      total += t.done;
      if (t.error != 0) {
        error = t.error;
        stop_io = true;
      } else if (t.done < size) {
        // A read: the file shrank since it was enqueued, or a write ahead
        // of it in the stream did not grow it as far.  A write: EIO.
        error = reading ? 0 : EIO;
        stop_io = true;
      }
    }
    if (reading && moved < size) {
      // The copy into device memory is in the stream already: past the
      // end of what was read it copies zeros, not an earlier op's staging.
      std::memset(static_cast<std::byte *>(slot.buffer.data()) + moved, 0, size - moved);
    }
    if (i + 1 == op.count && r.bytes_done != nullptr) {
      // The caller may read the result as soon as this chunk's flag lets
      // the stream pass, so the chain's fate must be known first: one cut
      // short lacks copies, and the bytes did not all move.  Issuing ends
      // in bounded time: the submitter waits for nothing of this op's.
      op.chain.wait(kIssuing, std::memory_order_acquire);
      if (op.chain.load(std::memory_order_acquire) == kAbandoned) {
        error = EIO;
        total = 0;
      }
      *r.bytes_done =
          error != 0 && total == 0 ? -static_cast<ssize_t>(error) : static_cast<ssize_t>(total);
    }
    store(slot.ready, op.ready_base[s] + j + 1);
    uses[s] = j + 1;
  }
  if (gave_up) {
    // Release every wait the stream may hold (flags only grow), report the
    // failure, and leave the slots out of the pool: copies issued before
    // the failure may still touch them.
    if (r.bytes_done != nullptr) {
      *r.bytes_done = -static_cast<ssize_t>(EIO);
    }
    for (std::size_t s = 0; s < k; ++s) {
      store(op.slots[s]->ready,
            op.ready_base[s] + static_cast<std::uint32_t>((op.count + k - 1 - s) / k));
    }
    leak_slots(op.slots);
  }
  op.uses = std::move(uses);
  if (!gave_up && r.dir == Direction::read) {
    // The file is read: the worker moves on, and the slots go back once the
    // stream has copied them out (reap).  A worker that waited here held
    // every read behind the slowest one before it in its stream.
    if (!stream_done(op)) {
      return true;
    }
  } else if (!gave_up) {
    // A write's slots go back once the stream has finished with them, and
    // once the submitter no longer reads them (its final waits come after
    // the last copy).
    gave_up = !wait_stream_done(op);
  }
  op.chain.wait(kIssuing, std::memory_order_acquire);
  retire(op, !gave_up);
  return false;
}

// Gives back what a finished op holds.  @p passed: its stream wrote every
// "done" flag the op's chain has; otherwise (a chain cut short, which may
// never write them) its slots stay out of the pool.
void StreamIo::Core::retire(Op &op, bool passed) noexcept {
  if (op.event != nullptr) {
    give_event(op.context, op.event);
    op.event = nullptr;
  }
  if (!passed) {
    leak_slots(op.slots);
    return;
  }
  op.stream_passed = op.request.dir == Direction::read;
  give_slots(op.slots);
}

// Retires the deferred reads whose streams are done with them, or whose
// chains were cut short; returns how many.  Never waits.  The ops' last
// references are dropped last, outside the lock: one of them may be the
// device's, and so destroy the StreamIo (see worker()).
std::size_t StreamIo::Core::reap() noexcept {
  std::vector<std::shared_ptr<Op>> done;
  {
    const std::lock_guard lock(mutex);
    // A bounded look per call, oldest first; ops still waiting go to the
    // back, so that one slow stream does not hide the others' finished ops.
    for (std::size_t n = std::min(retiring.size(), kReapBatch); n > 0; --n) {
      std::shared_ptr<Op> &op = retiring.front();
      const int chain = op->chain.load(std::memory_order_acquire);
      const bool finished = chain != kIssuing && (stream_done(*op) || chain == kAbandoned);
      try {
        if (finished) {
          done.push_back(std::move(op));
        } else {
          retiring.push_back(std::move(op));
        }
      } catch (...) {
        break;  // the op is still at the front: the next reap takes it
      }
      retiring.pop_front();
    }
  }
  for (const auto &op : done) {
    retire(*op, stream_done(*op));
    finish(*op);
  }
  const std::size_t n = done.size();
  done.clear();
  return n;
}

void StreamIo::Core::finish(Op &op) noexcept {
  // The submitter may still be putting the chain's end in the stream.
  op.chain.wait(kIssuing, std::memory_order_acquire);
  if (op.tail != nullptr) {
    retire_tail(op.context, op.tail);
  } else if (!op.stream_passed) {
    const std::lock_guard lock(mutex);
    keep_flags = true;  // nothing tells when the stream is past the op's waits
  }
}

// Caller holds the mutex and took the slot out of `free_slots` (and
// `free_bytes`) if it was there.  The flags go back to their pool; the
// buffer is freed by the caller once it dropped the mutex (cuMemFreeHost
// is slow).
void StreamIo::Core::free_slot_locked(std::unique_ptr<StagingSlot> slot,
                                      std::vector<PinnedBuffer> &buffers) noexcept {
  held -= slot->buffer.size();
  try {
    free_flags.push_back(slot->ready);
    free_flags.push_back(slot->done);
    buffers.push_back(std::move(slot->buffer));
  } catch (...) {
    // Freed here then, under the lock; a flag may be lost to the pool.
  }
}

// Waiting here cannot deadlock: the slots in use belong to ops that are
// queued for a worker (or about to be, by threads that do not wait for this
// one), and they come back once those ops' streams have copied them.
// Every op fits in the budget (enqueue_staged sizes it so), so once all of
// them are back the wait ends.
std::vector<std::unique_ptr<StagingSlot>> StreamIo::Core::take_slots(std::size_t k,
                                                                     std::size_t size) {
  std::vector<std::unique_ptr<StagingSlot>> taken;
  taken.reserve(k);
  std::vector<PinnedBuffer> trimmed;  // freed after the lock is dropped
  std::size_t fresh = 0;
  {
    std::unique_lock lock(mutex);
    const std::uint64_t ticket = next_ticket++;
    // One O_DIRECT block may exceed a tiny budget: the op still runs.
    const std::size_t budget = std::max(limits.staging_bytes, k * size);
    const auto fits = [&] { return held - free_bytes + k * size <= budget; };
    if (serving != ticket || !fits()) {
      ++waits;
      // Slots come back as workers reap; while every worker is busy, this
      // thread reaps too, less often the longer nothing comes back (a
      // stream held up for seconds is not looked at 50,000 times a second).
      auto wait = kReapPoll;
      while (!staging_changed.wait_for(lock, wait, [&] { return serving == ticket && fits(); })) {
        ++staging_wait_polls;
        lock.unlock();
        const std::size_t reaped = reap();
        lock.lock();
        wait = reaped == 0 ? std::min(wait * 2, kReapPollMax) : kReapPoll;
      }
    }
    // Idle slots of the same size first; then idle slots of other sizes
    // are freed until the new ones fit.
    for (auto it = free_slots.begin(); it != free_slots.end() && taken.size() < k;) {
      if ((*it)->buffer.size() == size) {
        free_bytes -= size;
        taken.push_back(std::move(*it));
        it = free_slots.erase(it);
      } else {
        ++it;
      }
    }
    // Short of room for new ones: larger idle slots serve as well (a chunk
    // fills the front of its slot), and freeing would wait for every
    // stream of the device, this op's earlier ones included.
    for (auto it = free_slots.begin();
         it != free_slots.end() && held + (k - taken.size()) * size > budget;) {
      if ((*it)->buffer.size() > size) {
        free_bytes -= (*it)->buffer.size();
        taken.push_back(std::move(*it));
        it = free_slots.erase(it);
      } else {
        ++it;
      }
    }
    fresh = k - taken.size();
    while (held + fresh * size > budget && !free_slots.empty()) {
      std::unique_ptr<StagingSlot> slot = std::move(free_slots.back());
      free_slots.pop_back();
      free_bytes -= slot->buffer.size();
      free_slot_locked(std::move(slot), trimmed);
    }
    held += fresh * size;  // reserved now, allocated below
    peak = std::max(peak, held);
    ++serving;
  }
  staging_changed.notify_all();
  std::size_t made = 0;
  try {
    for (; made < fresh; ++made) {
      auto slot = std::make_unique<StagingSlot>();
      slot->ready = take_flag();
      try {
        slot->done = take_flag();
        slot->buffer = PinnedBuffer(size);
      } catch (...) {
        give_flag(slot->ready);
        if (slot->done != nullptr) {
          give_flag(slot->done);
        }
        throw;
      }
      taken.push_back(std::move(slot));  // reserved: does not throw
    }
  } catch (...) {
    {
      const std::lock_guard lock(mutex);
      held -= (fresh - made) * size;
    }
    give_slots(taken);
    throw;
  }
  return taken;
}

void StreamIo::Core::give_slots(std::vector<std::unique_ptr<StagingSlot>> &slots) noexcept {
  if (slots.empty()) {
    return;
  }
  std::vector<PinnedBuffer> dropped;
  {
    const std::lock_guard lock(mutex);
    for (auto &slot : slots) {
      try {
        free_slots.push_back(std::move(slot));
        free_bytes += free_slots.back()->buffer.size();
      } catch (...) {
        free_slot_locked(std::move(slot), dropped);
      }
    }
  }
  slots.clear();
  staging_changed.notify_all();
}

namespace {

// Slots that a chain cut short may still copy into or out of are kept for
// the process's life: held here, so that they stay reachable (a leak
// checker sees memory kept on purpose, not lost).
void park_for_good(std::unique_ptr<StagingSlot> slot) noexcept {
  static std::mutex parking;
  // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): never freed, by design
  static auto *parked = new (std::nothrow) std::vector<std::unique_ptr<StagingSlot>>();
  const std::lock_guard lock(parking);
  try {
    if (parked == nullptr) {
      throw std::bad_alloc();
    }
    parked->push_back(std::move(slot));
  } catch (...) {
    (void)slot.release();  // NOLINT(bugprone-unused-return-value): out of memory: lost instead
  }
}

}  // namespace

void StreamIo::Core::leak_slots(std::vector<std::unique_ptr<StagingSlot>> &slots) noexcept {
  {
    const std::lock_guard lock(mutex);
    for (auto &slot : slots) {
      held -= slot->buffer.size();
      leaked += slot->buffer.size();
      park_for_good(std::move(slot));
    }
    keep_flags = true;  // their flags too
  }
  slots.clear();
  staging_changed.notify_all();
}

// Compat targets: the copies between staging and device memory go into the
// user's stream now, in order, each behind a wait for the I/O thread's
// "ready" flag (reads) or ahead of its "done" write (writes).  The I/O
// threads then never issue GPU work themselves, so nothing they do can
// queue behind the stream they are holding (implicit synchronisation,
// shared hardware queues).  The op is queued before the chain is issued: a
// long chain can fill the stream's queue, and only the I/O thread lets it
// drain.  Returns false when the generic path will do (nothing to copy);
// otherwise the op is handed to its I/O thread.
bool StreamIo::Core::enqueue_staged(const std::shared_ptr<Core> &self,
                                    const std::shared_ptr<Op> &keep, CUstream_st *stream) {
  // @p keep is shared with the I/O thread, which may finish before this returns.
  Op &op = *keep;
  const cuda::Driver &d = *cuda::driver();
  StreamRequest &r = op.request;
  op.length = r.size;
  if (r.dir == Direction::read) {
    // The copies' sizes are fixed now: reads stop at the end of file as it is.
    struct stat st = {};
    if (::fstat(r.fd, &st) == 0 && S_ISREG(st.st_mode)) {
      auto file_size = static_cast<std::uint64_t>(st.st_size);
      if (!op.ignore_order && pending_writes.load(std::memory_order_acquire) != 0) {
        file_size =
            std::max(file_size, pending_write_ends().furthest(FileKey{st.st_dev, st.st_ino}));
      }
      op.length = r.file_offset >= file_size ? 0
                                             : static_cast<std::size_t>(std::min<std::uint64_t>(
                                                   r.size, file_size - r.file_offset));
    }
  }
  if (op.length == 0) {
    return false;
  }
  // No slot is larger than the whole budget (but one O_DIRECT block): an op
  // larger than the budget cycles through fewer, smaller slots.
  const std::size_t block = r.policy.direct ? std::max<std::size_t>(r.policy.offset_align, 1) : 1;
  const std::size_t want =
      std::min(r.policy.direct ? limits.direct_chunk : limits.chunk, limits.staging_bytes);
  op.chunk = std::max(block, want / block * block);
  op.base = r.file_offset - r.file_offset % block;
  op.chunk =
      slot_size(static_cast<std::size_t>(r.file_offset + op.length - op.base), op.chunk, block);
  op.count =
      static_cast<std::size_t>((r.file_offset + op.length - op.base + op.chunk - 1) / op.chunk);
  const std::size_t k =
      std::min({op.count, limits.depth, std::max<std::size_t>(limits.staging_bytes / op.chunk, 1)});
  op.slots = take_slots(k, op.chunk);
  try {
    for (const auto &slot : op.slots) {
      op.ready_base.push_back(load(slot->ready));
      op.done_base.push_back(load(slot->done));
    }
    // A read waits for its stream's earlier work before it reads the file
    // only when a stream-ordered write could be part of that work: 256
    // stream-ordered 4 KiB reads took 47 ms against 2.4 ms for pread when
    // each one first waited for the one before it (issue 26).
    if (r.dir == Direction::read && !op.ignore_order &&
        pending_writes.load(std::memory_order_acquire) != 0) {
      op.event = take_event(op.context);
      if (const cuda::CUresult e = d.EventRecord(op.event, stream); e != cuda::kSuccess) {
        give_event(op.context, op.event);
        op.event = nullptr;
        cuda::check(e, "cuEventRecord");
      }
    }
  } catch (...) {
    give_slots(op.slots);  // nothing is in the stream yet
    throw;
  }
  op.staged = true;
  const auto device_ptr = [&d](std::uint32_t *flag) {
    cuda::CUdeviceptr p = 0;
    cuda::check(d.MemHostGetDevicePointer(&p, flag, 0), "cuMemHostGetDevicePointer");
    return p;
  };
  const cuda::CUdeviceptr device =
      cuda::CUdeviceptr{r.mapping->device_address()} + cuda::CUdeviceptr{r.mapping_offset};
  const bool ordered = !op.ignore_order;
  enqueue(self, keep);  // the I/O thread starts; both only read the op from here
  try {
    std::vector<std::uint32_t> uses(k, 0);
    for (std::size_t i = 0; i < op.count; ++i) {
      const std::size_t s = i % k;
      const auto j = static_cast<std::uint32_t>(i / k);
      StagingSlot &slot = *op.slots[s];
      std::uint64_t offset = 0;
      std::size_t size = 0;
      op.range(i, offset, size);
      const cuda::CUdeviceptr target = device + (offset - r.file_offset);
      if (r.dir == Direction::read) {
        if (ordered) {
          cuda::check(d.StreamWaitValue32(stream, device_ptr(slot.ready), op.ready_base[s] + j + 1,
                                          cuda::kStreamWaitValueGeq),
                      "cuStreamWaitValue32");
        }
        cuda::check(d.MemcpyHtoDAsync(target, slot.buffer.data(), size, stream),
                    "cuMemcpyHtoDAsync");
      } else {
        if (ordered && j > 0) {  // the slot's previous chunk is in the file
          cuda::check(d.StreamWaitValue32(stream, device_ptr(slot.ready), op.ready_base[s] + j,
                                          cuda::kStreamWaitValueGeq),
                      "cuStreamWaitValue32");
        }
        cuda::check(d.MemcpyDtoHAsync(slot.buffer.data(), target, size, stream),
                    "cuMemcpyDtoHAsync");
      }
      cuda::check(d.StreamWriteValue32(stream, device_ptr(slot.done), op.done_base[s] + j + 1,
                                       cuda::kStreamWriteValueDefault),
                  "cuStreamWriteValue32");
      uses[s] = j + 1;
    }
    if (ordered && r.dir == Direction::write) {
      // The stream goes on once every chunk is in the file.
      for (std::size_t s = 0; s < k; ++s) {
        cuda::check(d.StreamWaitValue32(stream, device_ptr(op.slots[s]->ready),
                                        op.ready_base[s] + uses[s], cuda::kStreamWaitValueGeq),
                    "cuStreamWaitValue32");
      }
    }
    // A read's last stream operation is a "done" write its worker waits
    // for (stream_passed); a write's final waits need a tail event.
    if (r.dir == Direction::write) {
      CUevent tail = take_event(op.context);
      if (const cuda::CUresult e = d.EventRecord(tail, stream); e != cuda::kSuccess) {
        give_event(op.context, tail);
        cuda::check(e, "cuEventRecord");
      }
      op.tail = tail;
    }
    op.set_chain(kComplete);
  } catch (...) {
    // Part of the chain may be in the stream already: the I/O thread
    // releases every flag and reports EIO through bytes_done.
    op.set_chain(kAbandoned);
  }
  return true;
}

void StreamIo::Core::submit(const std::shared_ptr<Core> &self, StreamRequest request,
                            CUstream_st *stream) {
  {
    std::unique_lock lock(mutex);
    trim_over.wait(lock, [this] { return !trimming; });
    ++submitting;
  }
  struct Leave {
    explicit Leave(Core &c) noexcept : core(c) {}
    Core &core;
    Leave(const Leave &) = delete;
    Leave &operator=(const Leave &) = delete;
    Leave(Leave &&) = delete;
    Leave &operator=(Leave &&) = delete;
    ~Leave() {
      const std::lock_guard lock(core.mutex);
      --core.submitting;
    }
  } const leave(*this);
  submit_inside(self, std::move(request), stream);
}

void StreamIo::Core::submit_inside(const std::shared_ptr<Core> &self, StreamRequest request,
                                   CUstream_st *stream) {
  const cuda::Driver &d = *cuda::driver();
  // The legacy default stream (null) means the current context's: make
  // the device's primary context current for the lookup.
  const CUcontext device_ctx = device_context();
  const cuda::ScopedContext outer(device_ctx);
  CUcontext context = nullptr;
  cuda::check(d.StreamGetCtx(stream, &context), "cuStreamGetCtx");
  const cuda::ScopedContext scope(context != device_ctx ? context : nullptr);
  int capturing = 0;
  cuda::check(d.StreamIsCapturing(stream, &capturing), "cuStreamIsCapturing");
  if (capturing != cuda::kStreamCaptureStatusNone) {
    throw_errno(EINVAL,
                "the stream is capturing a CUDA graph; stream-ordered I/O cannot be "
                "captured");
  }
  // Freed since it was registered: refuse now rather than copy into
  // whatever holds the address by the time the stream gets there.
  if (std::string lost = request.mapping->lost(); !lost.empty()) {
    throw_errno(EFAULT, lost);
  }
  if (request.policy.chunk_size == 0) {
    request.policy.chunk_size = request.device->options().staging_bytes;
  }
  ensure_worker(self);
  auto op = std::make_shared<Op>();
  if (request.dir == Direction::write) {
    pending_writes.fetch_add(1, std::memory_order_acq_rel);
    op->counted_write = true;
    struct stat st = {};
    if (::fstat(request.fd, &st) == 0 && S_ISREG(st.st_mode)) {
      op->write_file = FileKey{st.st_dev, st.st_ino};
      pending_write_ends().add(op->write_file, request.file_offset + request.size);
      op->write_end = request.file_offset + request.size;
    }
  }
  op->request = std::move(request);
  op->context = context;
  op->ignore_order = ignore_stream_order.load(std::memory_order_relaxed);
  if (op->request.device->capabilities().staged && enqueue_staged(self, op, stream)) {
    return;
  }
  if (!op->ignore_order) {
    op->event = take_event(context);
    if (const cuda::CUresult r = d.EventRecord(op->event, stream); r != cuda::kSuccess) {
      give_event(context, op->event);
      cuda::check(r, "cuEventRecord");
    }
  }
  try {
    op->flag = take_flag();
    op->value = load(op->flag) + 1;
    if (!op->ignore_order) {
      cuda::CUdeviceptr flag_device = 0;
      cuda::CUresult r = d.MemHostGetDevicePointer(&flag_device, op->flag, 0);
      if (r == cuda::kSuccess) {
        r = d.StreamWaitValue32(stream, flag_device, op->value, cuda::kStreamWaitValueGeq);
      }
      if (r != cuda::kSuccess) {
        auto wait = std::make_unique<HostWait>(HostWait{op->flag, op->value});
        cuda::check(d.LaunchHostFunc(stream, wait_flag, wait.get()), "cuLaunchHostFunc");
        (void)wait.release();  // wait_flag owns it now
      }
    }
  } catch (...) {
    if (op->flag != nullptr) {
      give_flag(op->flag);
    }
    if (op->event != nullptr) {
      give_event(context, op->event);  // recorded, never waited on: reusable
    }
    throw;
  }
  // From here the stream waits for the flag: the op must run, whatever happens.
  try {
    CUevent tail = take_event(context);
    if (d.EventRecord(tail, stream) == cuda::kSuccess) {
      op->tail = tail;
    } else {
      give_event(context, tail);
    }
  } catch (...) {
    // No tail: finish() keeps the flags for the process's life.
  }
  op->set_chain(kComplete);
  enqueue(self, std::move(op));
}

void StreamIo::Core::stop_and_join() noexcept {
  std::vector<std::thread> joining;
  {
    const std::lock_guard lock(mutex);
    stop = true;
    joining.swap(threads);
  }
  work.notify_all();
  for (std::thread &t : joining) {
    if (t.get_id() == std::this_thread::get_id()) {
      // The device's last reference went with this worker's op: it leaves
      // its loop as soon as this returns, holding the Core until then.
      t.detach();
    } else {
      t.join();
    }
  }
}

StreamIoStats StreamIo::Core::stats() const {
  const std::lock_guard lock(mutex);
  StreamIoStats s;
  s.threads_created = threads_created;
  s.threads_live = threads_live;
  s.staging_held = held;
  s.staging_peak = peak;
  s.staging_waits = waits;
  s.staging_wait_polls = staging_wait_polls;
  s.staging_leaked = leaked;
  s.reap_polls = reap_polls;
  return s;
}

namespace {

StreamLimits normalized(StreamLimits limits) noexcept {
  constexpr std::size_t kPage = 4096;
  limits.workers = std::max<std::size_t>(limits.workers, 1);
  limits.depth = std::max<std::size_t>(limits.depth, 1);
  limits.chunk = std::max(limits.chunk, kPage);
  limits.direct_chunk = std::max(limits.direct_chunk, kPage);
  limits.staging_bytes = std::max(limits.staging_bytes, kPage);
  limits.lanes = std::max<std::size_t>(limits.lanes, 1);
  return limits;
}

}  // namespace

StreamIo::StreamIo(int device_id, const StreamLimits &limits)
    : limits_(normalized(limits)), core_(std::make_shared<Core>(device_id, limits_)) {}

StreamIo::~StreamIo() {
  core_->stop_and_join();
}

void StreamIo::submit(StreamRequest request, CUstream_st *stream) {
  core_->submit(core_, std::move(request), stream);
}

StreamIoStats StreamIo::stats() const {
  return core_->stats();
}

void submit_stream_ordered(StreamRequest request, CUstream_st *stream) {
  if (cuda::driver() == nullptr) {
    throw_errno(ENOTSUP, "stream-ordered I/O needs CUDA: " + cuda::unavailable_reason());
  }
  // Held for the call, so the device (and its StreamIo) outlives the submit
  // even when the op finishes first and drops its reference.
  const std::shared_ptr<DeviceState> device = request.device;
  device->stream_io().submit(std::move(request), stream);
}

}  // namespace phx::detail

#else  // !PHX_WITH_CUDA

#include <cerrno>

#include "core/error.hpp"

namespace phx::detail {

struct StreamIo::Core {};

StreamIo::StreamIo(int /*device_id*/, const StreamLimits &limits)
    : limits_(limits), core_(std::make_shared<Core>()) {}

StreamIo::~StreamIo() = default;

void StreamIo::submit(StreamRequest /*request*/, CUstream_st * /*stream*/) {
  throw_errno(ENOTSUP, "stream-ordered I/O needs a libphoenix built with CUDA (PHX_WITH_CUDA)");
}

StreamIoStats StreamIo::stats() const {
  return {};
}

void submit_stream_ordered(StreamRequest /*request*/, CUstream_st * /*stream*/) {
  throw_errno(ENOTSUP, "stream-ordered I/O needs a libphoenix built with CUDA (PHX_WITH_CUDA)");
}

}  // namespace phx::detail

#endif  // PHX_WITH_CUDA
