// SPDX-License-Identifier: MIT
#include "engines/compat/copy_pool.hpp"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>
#include <utility>

#include "core/error.hpp"
#include "engines/compat/staging_pool.hpp"

namespace phx::detail {

struct CopyPool::Job {
  Direction dir = Direction::read;
  int fd = -1;
  std::uintptr_t device = 0;
  std::uint64_t file_offset = 0;
  std::uint64_t end = 0;
  IoPolicy policy;
  std::size_t chunk = 0;
  std::uint64_t base =
      0;  // file_offset rounded down to the block: chunk i>0 starts at base + i*chunk
  std::size_t count = 0;
  std::size_t next = 0;  // guarded by the pool's mutex
  std::vector<std::size_t> bytes;
  std::vector<int> errors;
  std::mutex mutex;
  std::condition_variable all_done;
  std::size_t finished = 0;
  std::atomic<std::size_t> finished_seen{0};  // finished, for polling without the mutex
  std::string detail;                         // first CUDA failure, in words

  void range(std::size_t i, std::uint64_t &offset, std::size_t &length) const noexcept {
    const std::uint64_t start = i == 0 ? file_offset : base + i * chunk;
    const std::uint64_t stop = std::min<std::uint64_t>(end, base + (i + 1) * chunk);
    offset = start;
    length = static_cast<std::size_t>(stop - start);
  }

  void complete(std::size_t i, std::size_t n, int err, std::string text = {}) noexcept {
    const std::lock_guard lock(mutex);
    bytes[i] = n;
    errors[i] = err;
    if (!text.empty() && detail.empty()) {
      detail = std::move(text);
    }
    // Notify under the lock: the waiter destroys the job as soon as it sees
    // the last completion.
    finished_seen.store(++finished, std::memory_order_release);
    if (finished == count) {
      all_done.notify_one();
    }
  }
};

namespace {

// Per-worker staging: a pinned buffer and the event marking when its last
// copy finished.
struct Slot {
  PinnedBuffer buffer;
  bool asked_pinner = false;  // the pinner's buffer for this slot taken, or known not coming
  cuda::CUevent event = nullptr;
  bool busy = false;
  CopyPool::Job *job = nullptr;
  std::size_t index = 0;
  std::size_t bytes = 0;
  int error = 0;
};

struct WorkerResources {
  cuda::CUstream stream = nullptr;
  std::vector<cuda::CUevent> events;
};

std::size_t round_up(std::size_t value, std::size_t to) {
  return (value + to - 1) / to * to;
}

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

/// Polls @p done for up to @p spin_us microseconds; true once it holds.
template <typename Predicate>
bool poll_for(unsigned spin_us, Predicate done) noexcept {
  if (spin_us == 0) {
    return false;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) {
        return true;
      }
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) {
      return done();
    }
  }
}

}  // namespace

CopyPoolConfig copy_pool_config(const Options &options) noexcept {
  CopyPoolConfig c;
  c.threads = options.copy_threads;
  // Whole pages: the staging slots are carved from one pinned allocation.
  c.chunk = round_up(options.copy_chunk, 4096);
  c.direct_chunk = round_up(options.copy_direct_chunk, 4096);
  c.depth = options.copy_depth;
  c.spin_us = options.copy_spin_us;
  return c;
}

std::size_t chunk_for(std::size_t size, std::size_t block, std::size_t configured,
                      std::size_t threads) noexcept {
  block = std::max<std::size_t>(block, 1);
  const std::size_t whole = std::max(block, configured / block * block);
  if (threads <= 1 || size <= kMinSpreadChunk) {
    return whole;
  }
  // A page multiple that is also a block multiple: blocks are powers of two.
  const std::size_t unit = std::max<std::size_t>(block, 4096);
  const std::size_t share = round_up((size + threads - 1) / threads, unit);
  return std::min(whole, std::max(share, round_up(kMinSpreadChunk, unit)));
}

CopyPool::CopyPool(std::shared_ptr<const cuda::Gpu> gpu, CopyPoolConfig config)
    : gpu_(std::move(gpu)), config_(config) {
  const cuda::Driver &d = *cuda::driver();
  std::vector<WorkerResources> resources(config_.threads);
  {
    const cuda::ScopedContext scope(gpu_->context());
    for (auto &r : resources) {
      cuda::check(d.StreamCreate(&r.stream, cuda::kStreamNonBlocking), "cuStreamCreate");
      r.events.resize(config_.depth);
      for (auto &e : r.events) {
        cuda::check(d.EventCreate(&e, cuda::kEventBlockingSync | cuda::kEventDisableTiming),
                    "cuEventCreate");
      }
    }
  }
  {
    const cuda::ScopedContext scope(gpu_->context());
    lanes_.resize(kInlineLanes);
    for (Lane &lane : lanes_) {
      lane.buffer = PinnedBuffer(kInlineBytes);
      cuda::check(d.StreamCreate(&lane.stream, cuda::kStreamNonBlocking), "cuStreamCreate");
      cuda::check(d.EventCreate(&lane.event, cuda::kEventBlockingSync | cuda::kEventDisableTiming),
                  "cuEventCreate");
      free_lanes_.push_back(&lane);
    }
  }
  pinned_.resize(config_.threads * config_.depth);
  threads_.reserve(config_.threads);
  for (std::size_t i = 0; i < config_.threads; ++i) {
    threads_.emplace_back([this, i, r = std::move(resources[i])]() mutable {
      worker(i, r.stream, std::move(r.events));
    });
  }
}

CopyPool::~CopyPool() {
  {
    std::unique_lock lock(pinned_mutex_);
    pin_stop_ = true;
    pinned_ready_.notify_all();
    // Bounded: the pinner stops after its current cuMemHostAlloc.
    pinned_ready_.wait(lock, [this] { return !pinner_running_; });
  }
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
    wanted_.store(true, std::memory_order_release);
  }
  work_.notify_all();
  for (auto &t : threads_) {
    t.join();
  }
  const cuda::Driver &d = *cuda::driver();
  const cuda::ScopedContext scope(gpu_->context());
  for (Lane &lane : lanes_) {
    if (lane.event != nullptr) {
      (void)d.EventDestroy(lane.event);
    }
    if (lane.stream != nullptr) {
      (void)d.StreamDestroy(lane.stream);
    }
  }
}

void CopyPool::pin_ahead() noexcept {
  // Named for top and debuggers, and for tests that must not fork while it runs.
  (void)::pthread_setname_np(::pthread_self(), "phx-pin");
  // Buffered chunks are the smaller ones; an O_DIRECT job grows its slots.
  const std::size_t size = std::min(config_.chunk, config_.direct_chunk);
  for (std::size_t k = 0; k < pinned_.size(); ++k) {
    PinnedBuffer buffer;
    try {
      buffer = PinnedBuffer::staging(size);
    } catch (...) {
      const std::lock_guard lock(pinned_mutex_);
      pin_failed_ = true;
      break;
    }
    const std::lock_guard lock(pinned_mutex_);
    if (pin_stop_) {
      break;  // freed here, with a context the buffer's destructor makes current
    }
    pinned_[k] = std::move(buffer);
    pinned_count_ = k + 1;
    pinned_ready_.notify_all();
  }
  // The last touch of this pool: the destructor may run once it sees it.
  const std::lock_guard lock(pinned_mutex_);
  pinner_running_ = false;
  pinned_ready_.notify_all();
}

PinnedBuffer CopyPool::take_pinned(std::size_t worker, std::size_t slot) noexcept {
  const std::size_t k = slot * config_.threads + worker;
  std::unique_lock lock(pinned_mutex_);
  if (k >= pinned_.size()) {
    return {};
  }
  // Bounded: the pinner moves on or stops after each cuMemHostAlloc.
  pinned_ready_.wait(lock, [&] { return pinned_count_ > k || pin_failed_ || pin_stop_; });
  return pinned_count_ > k ? std::move(pinned_[k]) : PinnedBuffer();
}

CopyPool::PinState CopyPool::poll_pinned(std::size_t worker, std::size_t slot,
                                         PinnedBuffer &out) noexcept {
  const std::size_t k = slot * config_.threads + worker;
  const std::lock_guard lock(pinned_mutex_);
  if (k >= pinned_.size()) {
    return PinState::never;
  }
  if (pinned_count_ > k) {
    out = std::move(pinned_[k]);
    return PinState::ready;
  }
  return pin_failed_ || pin_stop_ ? PinState::never : PinState::pending;
}

CopyPool::Lane *CopyPool::take_lane() noexcept {
  const std::lock_guard lock(lanes_mutex_);
  if (free_lanes_.empty()) {
    return nullptr;
  }
  Lane *lane = free_lanes_.back();
  free_lanes_.pop_back();
  return lane;
}

void CopyPool::give_lane(Lane *lane) noexcept {
  const std::lock_guard lock(lanes_mutex_);
  free_lanes_.push_back(lane);  // capacity reserved: lanes_ never grows
}

TransferResult CopyPool::run_inline(Lane &lane, Direction dir, int fd, std::uintptr_t device,
                                    std::size_t size, std::uint64_t file_offset,
                                    const IoPolicy &policy) noexcept {
  const cuda::Driver &d = *cuda::driver();
  const auto failed = [](TransferResult r, cuda::CUresult c, const char *call) {
    r.error = cuda::to_errno(c);
    try {
      r.detail = cuda::error_text(call, c);
    } catch (...) {
    }
    return r;
  };
  TransferResult result;
  try {
    const cuda::ScopedContext scope(gpu_->context());
    if (dir == Direction::read) {
      result = transfer(Direction::read, fd, lane.buffer.data(), size, file_offset, policy);
      if (result.done == 0) {
        return result;
      }
      if (const cuda::CUresult c =
              d.MemcpyHtoDAsync(device, lane.buffer.data(), result.done, lane.stream);
          c != cuda::kSuccess) {
        return failed({}, c, "cuMemcpyHtoDAsync");
      }
    } else if (const cuda::CUresult c =
                   d.MemcpyDtoHAsync(lane.buffer.data(), device, size, lane.stream);
               c != cuda::kSuccess) {
      return failed({}, c, "cuMemcpyDtoHAsync");
    }
    if (const cuda::CUresult c = d.EventRecord(lane.event, lane.stream); c != cuda::kSuccess) {
      (void)d.StreamSynchronize(lane.stream);
      return failed({}, c, "cuEventRecord");
    }
    if (const cuda::CUresult c = cuda::wait_event(lane.event); c != cuda::kSuccess) {
      return failed({}, c, "cuEventSynchronize");
    }
    if (dir == Direction::write) {
      result = transfer(Direction::write, fd, lane.buffer.data(), size, file_offset, policy);
    }
  } catch (const std::system_error &e) {
    result = {};
    result.error = e.code().value();
  } catch (...) {
    result = {};
    result.error = EIO;
  }
  return result;
}

bool CopyPool::spin_for_work() const noexcept {
  return poll_for(config_.spin_us, [this] { return wanted_.load(std::memory_order_acquire); });
}

bool CopyPool::take(Task &task, bool wait) {
  if (wait) {
    (void)spin_for_work();  // then the mutex, and the condition variable if still idle
  }
  std::unique_lock lock(mutex_);
  if (wait) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
  }
  if (queue_.empty()) {
    return false;
  }
  Job *job = queue_.front();
  task = {job, job->next++};
  if (job->next == job->count) {
    queue_.pop_front();
    wanted_.store(stop_ || !queue_.empty(), std::memory_order_release);
  }
  return true;
}

bool CopyPool::claim(Job &job, std::size_t &index) noexcept {
  const std::lock_guard lock(mutex_);
  if (job.next >= job.count) {
    return false;
  }
  index = job.next++;
  if (job.next == job.count) {
    if (auto it = std::find(queue_.begin(), queue_.end(), &job); it != queue_.end()) {
      queue_.erase(it);
    }
    wanted_.store(stop_ || !queue_.empty(), std::memory_order_release);
  }
  return true;
}

void CopyPool::help(Job &job, Lane &lane) noexcept {
  const std::size_t step = lane.buffer.size();
  std::size_t i = 0;
  while (claim(job, i)) {
    std::uint64_t offset = 0;
    std::size_t length = 0;
    job.range(i, offset, length);
    // In lane-sized steps whose ends fall on the piece's block-aligned grid.
    const std::uint64_t grid = job.base + i * job.chunk;
    TransferResult piece;
    std::uint64_t at = offset;
    while (at < offset + length) {
      const std::uint64_t stop =
          std::min<std::uint64_t>(offset + length, grid + ((at - grid) / step + 1) * step);
      const auto want = static_cast<std::size_t>(stop - at);
      TransferResult r = run_inline(lane, Direction::read, job.fd,
                                    job.device + (at - job.file_offset), want, at, job.policy);
      piece.done += r.done;
      if (r.error != 0) {
        piece.error = r.error;
        piece.detail = std::move(r.detail);
        break;
      }
      if (r.done < want) {
        break;  // end of file
      }
      at = stop;
    }
    caller_pieces_.fetch_add(1, std::memory_order_relaxed);
    job.complete(i, piece.done, piece.error, std::move(piece.detail));
  }
}

void CopyPool::worker(std::size_t worker_index, cuda::CUstream stream,
                      std::vector<cuda::CUevent> events) noexcept {
  const cuda::Driver &d = *cuda::driver();
  try {
    gpu_->make_current();
  } catch (...) {
    // Without a context every copy fails below and says so.
  }
  std::vector<Slot> slots(events.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    slots[i].event = events[i];
  }
  const auto fail_cuda = [](Job &job, std::size_t index, cuda::CUresult r, const char *call) {
    std::string text;
    try {
      text = cuda::error_text(call, r);
    } catch (...) {
    }
    job.complete(index, 0, cuda::to_errno(r), std::move(text));
  };
  // Copy finished: a read chunk is done; a write chunk can go to the file.
  const auto retire = [&](Slot &s) {
    s.busy = false;
    Job &job = *s.job;
    if (const cuda::CUresult r = cuda::wait_event(s.event); r != cuda::kSuccess) {
      fail_cuda(job, s.index, r, "cuEventSynchronize");
      return;
    }
    if (job.dir == Direction::read) {
      job.complete(s.index, s.bytes, s.error);
      return;
    }
    std::uint64_t offset = 0;
    std::size_t length = 0;
    job.range(s.index, offset, length);
    TransferResult w =
        transfer(Direction::write, job.fd, s.buffer.data(), length, offset, job.policy);
    job.complete(s.index, w.done, w.error);
  };
  const auto start = [&](Slot &s, Task task) {
    worker_pieces_.fetch_add(1, std::memory_order_relaxed);
    Job &job = *task.job;
    std::uint64_t offset = 0;
    std::size_t length = 0;
    job.range(task.index, offset, length);
    // A slot's first buffer comes from pin_ahead(); a larger chunk later
    // (O_DIRECT's), or a failed pin ahead, has the worker pin its own.
    if (s.buffer.size() == 0 && !s.asked_pinner) {
      s.buffer = take_pinned(worker_index, static_cast<std::size_t>(&s - slots.data()));
      s.asked_pinner = true;
    }
    if (s.buffer.size() < job.chunk) {
      try {
        s.buffer = PinnedBuffer();
        s.buffer = PinnedBuffer::staging(job.chunk);
      } catch (const std::system_error &e) {
        job.complete(task.index, 0, e.code().value(), e.what());
        return;
      } catch (...) {
        job.complete(task.index, 0, ENOMEM, "pinning a staging buffer");
        return;
      }
    }
    const cuda::CUdeviceptr device = job.device + (offset - job.file_offset);
    std::size_t copy = length;
    if (job.dir == Direction::read) {
      const TransferResult r =
          transfer(Direction::read, job.fd, s.buffer.data(), length, offset, job.policy);
      if (r.done == 0) {
        job.complete(task.index, 0, r.error);
        return;
      }
      s.bytes = r.done;
      s.error = r.error;
      copy = r.done;
      if (const cuda::CUresult c = d.MemcpyHtoDAsync(device, s.buffer.data(), copy, stream);
          c != cuda::kSuccess) {
        fail_cuda(job, task.index, c, "cuMemcpyHtoDAsync");
        return;
      }
    } else if (const cuda::CUresult c = d.MemcpyDtoHAsync(s.buffer.data(), device, copy, stream);
               c != cuda::kSuccess) {
      fail_cuda(job, task.index, c, "cuMemcpyDtoHAsync");
      return;
    }
    if (const cuda::CUresult c = d.EventRecord(s.event, stream); c != cuda::kSuccess) {
      (void)d.StreamSynchronize(stream);
      fail_cuda(job, task.index, c, "cuEventRecord");
      return;
    }
    s.busy = true;
    s.job = &job;
    s.index = task.index;
  };

  std::size_t cursor = 0;
  const auto any_busy = [&] {
    return std::any_of(slots.begin(), slots.end(), [](const Slot &s) { return s.busy; });
  };
  // Staging before work: a worker that claimed a piece and only then
  // waited for the pinner to reach its slot (workers' first slots come
  // 1-2 ms apart) held that piece back while the caller and the workers
  // already staged had nothing left to take; 4 MiB reads in a pool's first
  // 40 ms took 2-4 ms on the H200 machine.  So the next slot is one with a
  // buffer, and a worker with none waits for the pinner before it claims.
  const auto stage = [&] {
    Slot &next = slots[cursor];
    if (next.buffer.size() != 0 || next.asked_pinner) {
      return;
    }
    switch (poll_pinned(worker_index, cursor, next.buffer)) {
      case PinState::ready:
      case PinState::never:
        next.asked_pinner = true;
        return;
      case PinState::pending:
        break;
    }
    for (std::size_t k = 0; k < slots.size(); ++k) {
      if (slots[k].buffer.size() != 0) {
        cursor = k;
        return;
      }
    }
    // Nothing staged, so nothing in flight: wait (bounded: the pinner moves
    // on or stops after each cuMemHostAlloc, and the destructor stops it).
    next.buffer = take_pinned(worker_index, cursor);
    next.asked_pinner = true;
  };
  for (;;) {
    stage();
    Task task;
    const bool pending = any_busy();
    if (take(task, !pending)) {
      Slot &s = slots[cursor];
      cursor = (cursor + 1) % slots.size();
      if (s.busy) {
        retire(s);
      }
      start(s, task);
      continue;
    }
    if (!pending) {
      break;  // stopping, nothing queued, nothing in flight
    }
    // Nothing new: finish what is in flight, oldest first.
    for (std::size_t k = 0; k < slots.size(); ++k) {
      Slot &s = slots[(cursor + k) % slots.size()];
      if (s.busy) {
        retire(s);
      }
    }
  }
  const cuda::ScopedContext scope(gpu_->context());
  for (auto &s : slots) {
    (void)d.EventDestroy(s.event);
  }
  (void)d.StreamDestroy(stream);
}

TransferResult CopyPool::run(Direction dir, int fd, std::uintptr_t device, std::size_t size,
                             std::uint64_t file_offset, const IoPolicy &policy) noexcept {
  if (size == 0) {
    return {};
  }
  if (size < kSpreadBytes) {
    if (Lane *lane = take_lane(); lane != nullptr) {
      TransferResult r = run_inline(*lane, dir, fd, device, size, file_offset, policy);
      give_lane(lane);
      return r;
    }
  }
  try {
    std::call_once(pinner_once_, [this] {
      {
        const std::lock_guard lock(pinned_mutex_);
        pinner_running_ = true;
      }
      try {
        std::thread([this] { pin_ahead(); }).detach();
      } catch (...) {
        // No thread: every worker pins its own slots.
        const std::lock_guard lock(pinned_mutex_);
        pinner_running_ = false;
        pin_failed_ = true;
      }
    });
    Job job;
    job.dir = dir;
    job.fd = fd;
    job.device = device;
    job.file_offset = file_offset;
    job.end = file_offset + size;
    job.policy = policy;
    const std::size_t block = policy.direct ? std::max<std::size_t>(policy.offset_align, 1) : 1;
    const std::size_t chunk = policy.direct ? config_.direct_chunk : config_.chunk;
    job.chunk = chunk_for(size, block, chunk, config_.threads);
    job.base = file_offset - file_offset % block;
    job.count = static_cast<std::size_t>((job.end - job.base + job.chunk - 1) / job.chunk);
    job.bytes.assign(job.count, 0);
    job.errors.assign(job.count, 0);
    {
      const std::lock_guard lock(mutex_);
      queue_.push_back(&job);
      wanted_.store(true, std::memory_order_release);
    }
    if (job.count == 1) {
      work_.notify_one();
    } else {
      work_.notify_all();
    }
    if (dir == Direction::read && job.count > 1) {
      if (Lane *lane = take_lane(); lane != nullptr) {
        help(job, *lane);
        give_lane(lane);
      }
    }
    (void)poll_for(config_.spin_us, [&job] {
      return job.finished_seen.load(std::memory_order_acquire) == job.count;
    });
    // Taken even when polling saw the end: the last worker releases the
    // job's mutex after its final touch of the job, which dies with this frame.
    std::unique_lock lock(job.mutex);
    job.all_done.wait(lock, [&job] { return job.finished == job.count; });
    TransferResult result;
    for (std::size_t i = 0; i < job.count; ++i) {
      std::uint64_t offset = 0;
      std::size_t length = 0;
      job.range(i, offset, length);
      result.done += job.bytes[i];
      if (job.errors[i] != 0) {
        result.error = job.errors[i];
        result.detail = job.detail;
        break;
      }
      if (job.bytes[i] < length) {
        break;  // end of file
      }
    }
    return result;
  } catch (...) {
    TransferResult failed;
    failed.error = ENOMEM;
    return failed;
  }
}

}  // namespace phx::detail
