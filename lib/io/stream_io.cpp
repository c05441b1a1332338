// SPDX-License-Identifier: MIT
#include "io/stream_io.hpp"

#include "phoenix/config.h"

#if PHX_WITH_CUDA

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/device_state.hpp"
#include "core/error.hpp"
#include "cuda/driver_api.hpp"
#include "cuda/gpu.hpp"
#include "engines/compat/copy_pool.hpp"
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

// One in-flight stream-ordered I/O.
struct Op {
  StreamRequest request;
  CUcontext context = nullptr;
  CUevent event = nullptr;  // prior stream work; null: nothing to wait for
  std::uint32_t *flag = nullptr;
  std::uint32_t value = 0;
  // Staged (compat): the copies are in the stream, the I/O thread only
  // reads and writes files and flags.
  bool staged = false;
  // Set by the enqueueing thread when it could not put the whole chain in
  // the stream; the I/O thread then stops waiting for the stream.
  std::atomic<bool> abandoned{false};
  std::size_t chunk = 0;
  std::uint64_t base = 0;
  std::size_t length = 0;
  std::size_t count = 0;
  std::vector<StagingSlot *> slots;
  std::vector<std::uint32_t> ready_base;
  std::vector<std::uint32_t> done_base;

  void range(std::size_t i, std::uint64_t &offset, std::size_t &size) const noexcept {
    const std::uint64_t start = i == 0 ? request.file_offset : base + i * chunk;
    const std::uint64_t stop =
        std::min<std::uint64_t>(request.file_offset + length, base + (i + 1) * chunk);
    offset = start;
    size = static_cast<std::size_t>(stop - start);
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
// false when @p abandoned is set first.
bool wait_at_least(const std::uint32_t *flag, std::uint32_t target,
                   const std::atomic<bool> *abandoned = nullptr) noexcept {
  for (unsigned spins = 0; static_cast<std::int32_t>(load(flag) - target) < 0; ++spins) {
    if (abandoned != nullptr && abandoned->load(std::memory_order_acquire)) {
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

class StreamIo {
 public:
  static StreamIo &instance() {
    // Never destroyed: I/O threads may still be blocked in CUDA at exit.
    static auto *io = new StreamIo;  // NOLINT(cppcoreguidelines-owning-memory)
    return *io;
  }

  void submit(StreamRequest request, CUstream_st *stream);

 private:
  static constexpr std::size_t kFlagsPerBlock = 1024;
  static constexpr std::size_t kMaxThreads = 512;

  CUcontext device_context(int device_id);
  std::uint32_t *take_flag();
  void give_flag(std::uint32_t *flag);
  CUevent take_event(CUcontext context);
  void give_event(CUcontext context, CUevent event);
  void enqueue(std::shared_ptr<Op> op);
  void worker() noexcept;
  void run(Op &op) noexcept;
  void run_staged(Op &op) noexcept;
  bool enqueue_staged(std::shared_ptr<Op> &owned, CUstream_st *stream);
  StagingSlot *take_slot(std::size_t chunk);
  void give_slots(std::vector<StagingSlot *> &slots);

  std::mutex mutex_;
  std::map<int, std::unique_ptr<cuda::Gpu>> gpus_;
  std::vector<std::uint32_t *> free_flags_;
  std::map<CUcontext, std::vector<CUevent>> free_events_;
  std::vector<std::unique_ptr<StagingSlot>> slots_;
  std::vector<StagingSlot *> free_slots_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<Op>> queue_;
  std::size_t idle_ = 0;
  std::size_t threads_ = 0;
};

CUcontext StreamIo::device_context(int device_id) {
  const std::lock_guard lock(mutex_);
  auto it = gpus_.find(device_id);
  if (it == gpus_.end()) {
    std::string why;
    if (!cuda::gpu_for_device(device_id, why)) {
      it = gpus_.emplace(device_id, nullptr).first;
    } else {
      it = gpus_.emplace(device_id, std::make_unique<cuda::Gpu>(device_id)).first;
    }
  }
  return it->second ? it->second->context() : nullptr;
}

std::uint32_t *StreamIo::take_flag() {
  const std::lock_guard lock(mutex_);
  if (free_flags_.empty()) {
    // Portable, device-mapped pinned memory: every context's streams can wait on it.
    void *block = nullptr;
    cuda::check(
        cuda::driver()->MemHostAlloc(&block, kFlagsPerBlock * sizeof(std::uint32_t),
                                     cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap),
        "cuMemHostAlloc(flags)");
    auto *flags = static_cast<std::uint32_t *>(block);
    for (std::size_t i = 0; i < kFlagsPerBlock; ++i) {
      flags[i] = 0;
      free_flags_.push_back(flags + i);
    }
  }
  std::uint32_t *flag = free_flags_.back();
  free_flags_.pop_back();
  return flag;
}

void StreamIo::give_flag(std::uint32_t *flag) {
  const std::lock_guard lock(mutex_);
  free_flags_.push_back(flag);
}

// Unused only in the broken-order test build.
[[maybe_unused]] CUevent StreamIo::take_event(CUcontext context) {
  {
    const std::lock_guard lock(mutex_);
    auto &pool = free_events_[context];
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

void StreamIo::give_event(CUcontext context, CUevent event) {
  const std::lock_guard lock(mutex_);
  free_events_[context].push_back(event);
}

void StreamIo::enqueue(std::shared_ptr<Op> op) {
  bool spawn = false;
  {
    const std::lock_guard lock(mutex_);
    queue_.push_back(std::move(op));
    // An op may block its thread until earlier stream work is done, so a
    // thread per op in flight: grow when none is idle.
    if (idle_ == 0 && threads_ < kMaxThreads) {
      ++threads_;
      spawn = true;
    }
  }
  if (spawn) {
    std::thread([this] { worker(); }).detach();
  } else {
    work_.notify_one();
  }
}

void StreamIo::worker() noexcept {
  for (;;) {
    std::shared_ptr<Op> op;
    {
      std::unique_lock lock(mutex_);
      ++idle_;
      work_.wait(lock, [this] { return !queue_.empty(); });
      --idle_;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    run(*op);
  }
}

void StreamIo::run(Op &op) noexcept {
  if (op.staged) {
    run_staged(op);
    return;
  }
  const cuda::Driver &d = *cuda::driver();
  StreamRequest &r = op.request;
  ssize_t result = -EIO;
  if (d.CtxSetCurrent(op.context) == cuda::kSuccess &&
      (op.event == nullptr || d.EventSynchronize(op.event) == cuda::kSuccess)) {
    const TransferResult t = r.device->backend().transfer(r.dir, r.fd, *r.mapping, r.mapping_offset,
                                                          r.size, r.file_offset, r.policy);
    result =
        t.error != 0 && t.done == 0 ? -static_cast<ssize_t>(t.error) : static_cast<ssize_t>(t.done);
  }
  if (r.bytes_done != nullptr) {
    *r.bytes_done = result;
  }
  if (op.event != nullptr) {
    try {
      give_event(op.context, op.event);
    } catch (...) {
      (void)d.EventDestroy(op.event);
    }
  }
  // Release the stream: bytes_done is visible before the flag (seq_cst, as
  // in store()).
  std::atomic_ref<std::uint32_t>(*op.flag).store(op.value, std::memory_order_seq_cst);
  try {
    give_flag(op.flag);
  } catch (...) {
    // The flag leaks; the pool grows a new block if needed.
  }
  r = {};  // drop the registration and device references now
}

StagingSlot *StreamIo::take_slot(std::size_t chunk) {
  {
    const std::lock_guard lock(mutex_);
    const auto it =
        std::find_if(free_slots_.begin(), free_slots_.end(),
                     [chunk](const StagingSlot *s) { return s->buffer.size() >= chunk; });
    if (it != free_slots_.end()) {
      StagingSlot *slot = *it;
      free_slots_.erase(it);
      return slot;
    }
  }
  auto slot = std::make_unique<StagingSlot>();
  slot->buffer = PinnedBuffer(chunk);
  slot->ready = take_flag();
  slot->done = take_flag();
  const std::lock_guard lock(mutex_);
  slots_.push_back(std::move(slot));
  return slots_.back().get();
}

void StreamIo::give_slots(std::vector<StagingSlot *> &slots) {
  const std::lock_guard lock(mutex_);
  free_slots_.insert(free_slots_.end(), slots.begin(), slots.end());
  slots.clear();
}

// Compat targets: the copies between staging and device memory go into the
// user's stream now, in order, each behind a wait for the I/O thread's
// "ready" flag (reads) or ahead of its "done" write (writes).  The I/O
// threads then never issue GPU work themselves, so nothing they do can
// queue behind the stream they are holding (implicit synchronisation,
// shared hardware queues).  The I/O thread starts before the chain is
// issued: a long chain can fill the stream's queue, and only the I/O thread
// lets it drain.  Returns false, keeping @p owned, when the generic path
// will do (nothing to copy); otherwise the op is handed to its I/O thread.
bool StreamIo::enqueue_staged(std::shared_ptr<Op> &owned, CUstream_st *stream) {
  // Shared with the I/O thread, which may finish before this function returns.
  const std::shared_ptr<Op> keep = owned;
  Op &op = *keep;
  const cuda::Driver &d = *cuda::driver();
  StreamRequest &r = op.request;
  op.length = r.size;
  if (r.dir == Direction::read) {
    // The copies' sizes are fixed now: reads stop at the end of file as it is.
    struct stat st = {};
    if (::fstat(r.fd, &st) == 0 && S_ISREG(st.st_mode)) {
      const auto file_size = static_cast<std::uint64_t>(st.st_size);
      op.length = r.file_offset >= file_size ? 0
                                             : static_cast<std::size_t>(std::min<std::uint64_t>(
                                                   r.size, file_size - r.file_offset));
    }
  }
  if (op.length == 0) {
    return false;
  }
  const CopyPoolConfig config = copy_pool_config(r.device->options());
  const std::size_t block = r.policy.direct ? std::max<std::size_t>(r.policy.offset_align, 1) : 1;
  const std::size_t chunk = r.policy.direct ? config.direct_chunk : config.chunk;
  op.chunk = std::max(block, chunk / block * block);
  op.base = r.file_offset - r.file_offset % block;
  op.count =
      static_cast<std::size_t>((r.file_offset + op.length - op.base + op.chunk - 1) / op.chunk);
  const std::size_t k = std::min(op.count, std::clamp<std::size_t>(config.depth * 2, 2, 8));
  try {
    for (std::size_t i = 0; i < k; ++i) {
      op.slots.push_back(take_slot(op.chunk));
      op.ready_base.push_back(load(op.slots.back()->ready));
      op.done_base.push_back(load(op.slots.back()->done));
    }
    if (r.dir == Direction::read) {
#ifndef PHX_BREAK_STREAM_ORDER
      op.event = take_event(op.context);
      if (const cuda::CUresult e = d.EventRecord(op.event, stream); e != cuda::kSuccess) {
        give_event(op.context, op.event);
        op.event = nullptr;
        cuda::check(e, "cuEventRecord");
      }
#endif
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
  [[maybe_unused]] const Direction dir = r.dir;  // unused in the broken-order test build
  enqueue(std::move(owned));  // the I/O thread starts; both only read the op from here
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
#ifndef PHX_BREAK_STREAM_ORDER
        cuda::check(d.StreamWaitValue32(stream, device_ptr(slot.ready), op.ready_base[s] + j + 1,
                                        cuda::kStreamWaitValueGeq),
                    "cuStreamWaitValue32");
#endif
        cuda::check(d.MemcpyHtoDAsync(target, slot.buffer.data(), size, stream),
                    "cuMemcpyHtoDAsync");
      } else {
#ifndef PHX_BREAK_STREAM_ORDER
        if (j > 0) {  // the slot's previous chunk is in the file
          cuda::check(d.StreamWaitValue32(stream, device_ptr(slot.ready), op.ready_base[s] + j,
                                          cuda::kStreamWaitValueGeq),
                      "cuStreamWaitValue32");
        }
#endif
        cuda::check(d.MemcpyDtoHAsync(slot.buffer.data(), target, size, stream),
                    "cuMemcpyDtoHAsync");
      }
      cuda::check(d.StreamWriteValue32(stream, device_ptr(slot.done), op.done_base[s] + j + 1,
                                       cuda::kStreamWriteValueDefault),
                  "cuStreamWriteValue32");
      uses[s] = j + 1;
    }
#ifndef PHX_BREAK_STREAM_ORDER
    if (dir == Direction::write) {
      // The stream goes on once every chunk is in the file.
      for (std::size_t s = 0; s < k; ++s) {
        cuda::check(d.StreamWaitValue32(stream, device_ptr(op.slots[s]->ready),
                                        op.ready_base[s] + uses[s], cuda::kStreamWaitValueGeq),
                    "cuStreamWaitValue32");
      }
    }
#endif
  } catch (...) {
    // Part of the chain may be in the stream already: the I/O thread
    // releases every flag and reports EIO through bytes_done.
    op.abandoned.store(true, std::memory_order_release);
  }
  return true;
}

void StreamIo::run_staged(Op &op) noexcept {
  const cuda::Driver &d = *cuda::driver();
  StreamRequest &r = op.request;
  const std::size_t k = op.slots.size();
  int error = 0;
  bool stop = false;
  std::size_t total = 0;
  if (op.event != nullptr) {
    if (d.CtxSetCurrent(op.context) != cuda::kSuccess ||
        d.EventSynchronize(op.event) != cuda::kSuccess) {
      error = EIO;
      stop = true;
    }
  }
  const std::atomic<bool> *abandoned = &op.abandoned;
  bool gave_up = false;
  std::vector<std::uint32_t> uses(k, 0);
  for (std::size_t i = 0; i < op.count && !gave_up; ++i) {
    const std::size_t s = i % k;
    const auto j = static_cast<std::uint32_t>(i / k);
    StagingSlot &slot = *op.slots[s];
    std::uint64_t offset = 0;
    std::size_t size = 0;
    op.range(i, offset, size);
    if (r.dir == Direction::read) {
      // The stream copied the slot's previous chunk out.
      if (!wait_at_least(slot.done, op.done_base[s] + j, abandoned)) {
        gave_up = true;
        break;
      }
      if (!stop) {
        const TransferResult t =
            transfer(Direction::read, r.fd, slot.buffer.data(), size, offset, r.policy);
        total += t.done;
        if (t.error != 0) {
          error = t.error;
          stop = true;
        } else if (t.done < size) {
          stop = true;  // the file shrank since the read was enqueued
        }
      }
    } else {
#ifndef PHX_BREAK_STREAM_ORDER
      // The stream copied the chunk in.
      if (!wait_at_least(slot.done, op.done_base[s] + j + 1, abandoned)) {
        gave_up = true;
        break;
      }
#endif
      if (!stop) {
        const TransferResult t =
            transfer(Direction::write, r.fd, slot.buffer.data(), size, offset, r.policy);
        total += t.done;
        if (t.error != 0 || t.done < size) {
          error = t.error != 0 ? t.error : EIO;
          stop = true;
        }
      }
    }
    if (i + 1 == op.count && r.bytes_done != nullptr) {
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
    op.slots.clear();
  }
  // The slots go back once the stream has finished with them.
  for (std::size_t s = 0; s < op.slots.size(); ++s) {
    (void)wait_at_least(op.slots[s]->done, op.done_base[s] + uses[s]);
  }
  if (op.event != nullptr) {
    try {
      give_event(op.context, op.event);
    } catch (...) {
      (void)d.EventDestroy(op.event);
    }
  }
  try {
    give_slots(op.slots);
  } catch (...) {
  }
}

// Fallback when the driver refuses stream memory operations: the paper's
// way, a host function that holds the stream until the flag is set.
struct HostWait {
  std::uint32_t *flag;
  std::uint32_t value;
};
[[maybe_unused]] void wait_flag(void *arg) {
  std::unique_ptr<HostWait> w(static_cast<HostWait *>(arg));
  std::atomic_ref<std::uint32_t> flag(*w->flag);
  while (static_cast<std::int32_t>(flag.load(std::memory_order_acquire) - w->value) < 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void StreamIo::submit(StreamRequest request, CUstream_st *stream) {
  const cuda::Driver &d = *cuda::driver();
  // The legacy default stream (null) means the current context's: make
  // the device's primary context current for the lookup.
  const CUcontext device_ctx = device_context(request.device->id());
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
  auto op = std::make_shared<Op>();
  op->request = std::move(request);
  op->context = context;
  if (op->request.device->capabilities().staged && enqueue_staged(op, stream)) {
    return;
  }
#ifndef PHX_BREAK_STREAM_ORDER
  op->event = take_event(context);
  if (const cuda::CUresult r = d.EventRecord(op->event, stream); r != cuda::kSuccess) {
    give_event(context, op->event);
    cuda::check(r, "cuEventRecord");
  }
#endif
  op->flag = take_flag();
  op->value = std::atomic_ref<std::uint32_t>(*op->flag).load(std::memory_order_relaxed) + 1;
#ifndef PHX_BREAK_STREAM_ORDER
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
#endif
  // From here the stream waits for the flag: the op must run, whatever happens.
  enqueue(std::move(op));
}

}  // namespace

void submit_stream_ordered(StreamRequest request, CUstream_st *stream) {
  if (cuda::driver() == nullptr) {
    throw_errno(ENOTSUP, "stream-ordered I/O needs CUDA: " + cuda::unavailable_reason());
  }
  StreamIo::instance().submit(std::move(request), stream);
}

}  // namespace phx::detail

#else  // !PHX_WITH_CUDA

#include <cerrno>

#include "core/error.hpp"

namespace phx::detail {

void submit_stream_ordered(StreamRequest /*request*/, CUstream_st * /*stream*/) {
  throw_errno(ENOTSUP, "stream-ordered I/O needs a libphoenix built with CUDA (PHX_WITH_CUDA)");
}

}  // namespace phx::detail

#endif  // PHX_WITH_CUDA
