// SPDX-License-Identifier: MIT
// Stream-ordered gathers.  As for single stream-ordered I/Os (stream_io),
// the caller's thread only enqueues on the stream an event (prior work
// done) and a cuStreamWaitValue32 on a pinned flag; the gather's thread
// waits for the event, runs the gather, stores the result, then the flag,
// and the stream resumes.  A gather is one operation on the gatherer's
// thread, so it keeps its place among the Gather's other operations.
#include "gather/gatherer.hpp"
#include "phoenix/config.h"

#if PHX_WITH_CUDA

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "cuda/driver_api.hpp"
#include "cuda/gpu.hpp"
#include "gather/gather_run.hpp"

namespace phx::detail {
namespace {

// Device-mapped pinned words; a flag only grows, so it is reused as is.
class FlagPool {
 public:
  static FlagPool &instance() {
    static FlagPool pool;
    return pool;
  }
  std::uint32_t *take() {
    const std::lock_guard lock(mutex_);
    if (free_.empty()) {
      void *block = nullptr;
      cuda::check(
          cuda::driver()->MemHostAlloc(&block, kPerBlock * sizeof(std::uint32_t),
                                       cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap),
          "cuMemHostAlloc(gather flags)");
      auto *words = static_cast<std::uint32_t *>(block);
      for (std::size_t i = 0; i < kPerBlock; ++i) {
        words[i] = 0;
        free_.push_back(words + i);
      }
    }
    std::uint32_t *flag = free_.back();
    free_.pop_back();
    return flag;
  }
  void give(std::uint32_t *flag) {
    const std::lock_guard lock(mutex_);
    free_.push_back(flag);
  }
  // The device's primary context, kept for the life of the process.
  cuda::CUcontext context(int device_id) {
    const std::lock_guard lock(mutex_);
    auto it = gpus_.find(device_id);
    if (it == gpus_.end()) {
      it = gpus_.emplace(device_id, std::make_unique<cuda::Gpu>(device_id)).first;
    }
    return it->second->context();
  }

 private:
  static constexpr std::size_t kPerBlock = 256;
  std::mutex mutex_;
  std::vector<std::uint32_t *> free_;
  std::map<int, std::unique_ptr<cuda::Gpu>> gpus_;
};

struct HostWait {
  std::uint32_t *flag;
  std::uint32_t value;
};

// The stream's wait when stream memory operations are unavailable.
void wait_on_host(void *arg) {
  const std::unique_ptr<HostWait> w(static_cast<HostWait *>(arg));
  const std::atomic_ref<std::uint32_t> flag(*w->flag);
  while (static_cast<std::int32_t>(flag.load(std::memory_order_acquire) - w->value) < 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace

void post_stream_ordered(Gatherer &gatherer, Direction dir, std::vector<GatherEntry> entries,
                         GatherResult *result, CUstream_st *stream) {
  const cuda::Driver *driver = cuda::driver();
  if (driver == nullptr) {
    throw_errno(ENOTSUP, "stream-ordered gathers need CUDA: " + cuda::unavailable_reason());
  }
  const cuda::Driver &d = *driver;
  FlagPool &pool = FlagPool::instance();
  const cuda::ScopedContext outer(pool.context(gatherer.device_id()));
  cuda::CUcontext context = nullptr;
  cuda::check(d.StreamGetCtx(stream, &context), "cuStreamGetCtx");
  const cuda::ScopedContext scope(context);
  int capturing = 0;
  cuda::check(d.StreamIsCapturing(stream, &capturing), "cuStreamIsCapturing");
  if (capturing != cuda::kStreamCaptureStatusNone) {
    throw_errno(EINVAL,
                "the stream is capturing a CUDA graph; a stream-ordered gather cannot be "
                "captured");
  }
  cuda::CUevent event = nullptr;
  cuda::check(d.EventCreate(&event, cuda::kEventBlockingSync | cuda::kEventDisableTiming),
              "cuEventCreate");
  if (const cuda::CUresult r = d.EventRecord(event, stream); r != cuda::kSuccess) {
    (void)d.EventDestroy(event);
    cuda::check(r, "cuEventRecord");
  }
  std::uint32_t *flag = pool.take();
  const std::uint32_t value =
      std::atomic_ref<std::uint32_t>(*flag).load(std::memory_order_relaxed) + 1;
  cuda::CUdeviceptr flag_device = 0;
  cuda::CUresult r = d.MemHostGetDevicePointer(&flag_device, flag, 0);
  if (r == cuda::kSuccess) {
    r = d.StreamWaitValue32(stream, flag_device, value, cuda::kStreamWaitValueGeq);
  }
  if (r != cuda::kSuccess) {
    auto wait = std::make_unique<HostWait>(HostWait{flag, value});
    if (const cuda::CUresult h = d.LaunchHostFunc(stream, wait_on_host, wait.get());
        h != cuda::kSuccess) {
      (void)d.EventDestroy(event);
      pool.give(flag);
      cuda::check(h, "cuLaunchHostFunc");
    }
    (void)wait.release();  // wait_on_host owns it now
  }
  // From here the stream waits for the flag: the job must run and set it.
  gatherer.post([&gatherer, dir, entries = std::move(entries), result, context, event, flag, value](
                    GatherMover *mover, const std::exception_ptr &error) {
    const cuda::Driver &drv = *cuda::driver();
    GatherResult out;
    try {
      {
        const cuda::ScopedContext ctx(context);
        cuda::check(drv.EventSynchronize(event), "cuEventSynchronize");
        (void)drv.EventDestroy(event);
      }
      if (mover == nullptr) {
        std::rethrow_exception(error);
      }
      out = run_gather(*mover, dir, entries, gatherer.options().max_request,
                       gatherer.options().merge);
    } catch (const std::system_error &e) {
      out = {};
      out.entries = entries.size();
      for (std::size_t i = 0; i < entries.size(); ++i) {
        out.failures.push_back({i, e.code().value(), 0});
      }
    } catch (...) {
      out = {};
      out.entries = entries.size();
      for (std::size_t i = 0; i < entries.size(); ++i) {
        out.failures.push_back({i, EIO, 0});
      }
    }
    if (result != nullptr) {
      *result = std::move(out);
    }
    // The result is visible before the flag releases the stream.
    std::atomic_ref<std::uint32_t>(*flag).store(value, std::memory_order_seq_cst);
    FlagPool::instance().give(flag);
  });
}

}  // namespace phx::detail

#else  // !PHX_WITH_CUDA

#include <cerrno>

#include "core/error.hpp"

namespace phx::detail {

void post_stream_ordered(Gatherer & /*gatherer*/, Direction /*dir*/,
                         std::vector<GatherEntry> /*entries*/, GatherResult * /*result*/,
                         CUstream_st * /*stream*/) {
  throw_errno(ENOTSUP, "stream-ordered gathers need a libphoenix built with CUDA (PHX_WITH_CUDA)");
}

}  // namespace phx::detail

#endif  // PHX_WITH_CUDA
