// SPDX-License-Identifier: MIT
// The gather mover for the compat engine: io_uring reads into pinned
// staging slots, the completions of each wait start their slots' copies to
// the GPU at once (one cuMemcpyBatchAsync on the mover's stream), and a slot
// is reused when its copy's event has passed, so the file reads and the PCIe
// copies overlap.  Writes copy a batch of slots from the GPU, wait once,
// then write them.  Small KV blocks make many small copies: one
// cuMemcpyHtoDAsync costs the CPU about 2.5 us (H200), which delayed the
// last requests of a sequence by as much as reading them took.
// One file for both builds: without CUDA it only says ENOTSUP.
#include "gather/gather_mover.hpp"
#include "phoenix/config.h"

#if PHX_WITH_CUDA

#include <cerrno>
#include <deque>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/registration_access.hpp"
#include "cuda/driver_api.hpp"
#include "cuda/gpu.hpp"
#include "engines/compat/staging_pool.hpp"

namespace phx::detail {
namespace {

class StagedMover final : public GatherMover {
 public:
  StagedMover(int device_id, unsigned depth, std::size_t slot_size, std::size_t count)
      : gpu_(device_id), queue_(depth), depth_(depth), slot_size_(slot_size) {
    const cuda::Driver &d = *cuda::driver();
    batch_copies_ = d.MemcpyBatchAsync != nullptr;
    const cuda::ScopedContext scope(gpu_.context());
    cuda::check(d.StreamCreate(&stream_, cuda::kStreamNonBlocking), "cuStreamCreate");
    slots_.resize(count);
    events_.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      if (const cuda::CUresult r =
              d.EventCreate(&events_[i], cuda::kEventBlockingSync | cuda::kEventDisableTiming);
          r != cuda::kSuccess) {
        events_[i] = nullptr;
        destroy();
        cuda::check(r, "cuEventCreate");
      }
    }
  }
  ~StagedMover() override { destroy(); }
  StagedMover(const StagedMover &) = delete;
  StagedMover &operator=(const StagedMover &) = delete;
  StagedMover(StagedMover &&) = delete;
  StagedMover &operator=(StagedMover &&) = delete;

  void move(Direction dir, std::span<const PlannedRequest> requests,
            std::span<RequestOutcome> outcomes) override {
    const cuda::ScopedContext scope(gpu_.context());
    lost_requests(requests, slot_size_, lost_);
    free_.clear();
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      free_.push_back(i);
    }
    if (dir == Direction::read) {
      read(requests, outcomes);
    } else {
      write(requests, outcomes);
    }
    cuda::check(cuda::driver()->StreamSynchronize(stream_), "cuStreamSynchronize");
    for (Slot &s : slots_) {
      s.copying = false;
    }
  }

 private:
  // A slot's copy is done when its event (shared by the copies started
  // after one wait) has passed.  Events are recorded round robin: one
  // re-recorded before a slot waited on it only makes that wait later.
  struct Slot {
    PinnedBuffer buffer;  // pinned when the slot is first taken
    std::byte *data = nullptr;
    cuda::CUevent event = nullptr;
    bool copying = false;
    std::size_t request = 0;
  };

  // One copy between a staging slot and the GPU; dst and src are addresses
  // in the process's unified space (host or device), as the batch takes them.
  struct Copy {
    std::size_t slot = 0;
    bool to_gpu = true;  // a read's copy; false: a write's, GPU to the slot
    cuda::CUdeviceptr dst = 0;
    cuda::CUdeviceptr src = 0;
    std::size_t size = 0;
    int error = 0;
  };

  static cuda::CUdeviceptr device_address(const PlannedRequest &r) {
    return reinterpret_cast<std::uintptr_t>(r.registration->device_address()) + r.reg_offset;
  }

  // The oldest free slot, once its last copy has finished.  Slots are
  // taken in order and pinned the first time: a small move pins only the
  // slots it uses, and a large one starts reading after the first slot
  // instead of after all of them (a loader's stream holds up to 1.3 GiB,
  // about 0.2 s to pin), pinning the rest while its first reads run.
  std::size_t take_slot() {
    const std::size_t s = free_.front();
    if (slots_[s].data == nullptr) {
      slots_[s].buffer = PinnedBuffer(slot_size_);
      slots_[s].data = slots_[s].buffer.data();
    }
    free_.pop_front();
    if (slots_[s].copying) {
      cuda::check(cuda::wait_event(slots_[s].event), "cuEventSynchronize");
      slots_[s].copying = false;
    }
    return s;
  }

  // Starts the next request, in order, on a slot (@p slot): requests into
  // memory lost since registration fail with EFAULT on the way.  False when
  // none can start now: all started, no free slot, or @p in_flight at depth.
  bool next_request(std::span<RequestOutcome> outcomes, std::size_t &next, std::size_t in_flight,
                    std::size_t &slot) {
    while (next < lost_.size() && !free_.empty() && in_flight < depth_) {
      if (lost_[next] != 0) {
        outcomes[next++] = {0, EFAULT};
        continue;
      }
      slot = take_slot();
      slots_[slot].request = next++;
      return true;
    }
    return false;
  }

  void read(std::span<const PlannedRequest> requests, std::span<RequestOutcome> outcomes) {
    std::vector<IoRequest> batch;
    std::size_t next = 0;
    while (next < requests.size() || queue_.outstanding() > 0) {
      batch.clear();
      std::size_t slot = 0;
      while (next_request(outcomes, next, queue_.outstanding() + batch.size(), slot)) {
        const PlannedRequest &r = requests[slots_[slot].request];
        batch.push_back({IoOp::read, r.file, slots_[slot].data, r.size, r.file_offset, slot});
      }
      queue_.submit(batch);
      copies_.clear();
      for (const IoCompletion &c : queue_.wait(1)) {
        Slot &s = slots_[c.user_data];
        outcomes[s.request] = {c.bytes, c.error};
        if (c.bytes > 0) {
          copies_.push_back({c.user_data, true, device_address(requests[s.request]),
                             reinterpret_cast<std::uintptr_t>(s.data), c.bytes});
        }
        count_read(c.bytes);
        free_.push_back(c.user_data);
      }
      start_copies();
      for (const Copy &c : copies_) {
        if (c.error != 0) {
          outcomes[slots_[c.slot].request] = {0, c.error};
        }
      }
      mark_copying();
    }
  }

  void write(std::span<const PlannedRequest> requests, std::span<RequestOutcome> outcomes) {
    std::vector<IoRequest> batch;
    std::size_t next = 0;
    while (next < requests.size() || queue_.outstanding() > 0) {
      copies_.clear();
      std::size_t slot = 0;
      while (next_request(outcomes, next, queue_.outstanding() + copies_.size(), slot)) {
        const PlannedRequest &r = requests[slots_[slot].request];
        copies_.push_back({slot, false, reinterpret_cast<std::uintptr_t>(slots_[slot].data),
                           device_address(r), r.size});
      }
      if (!copies_.empty()) {
        start_copies();
        // One wait for the whole batch's copies before any of it is written.
        cuda::check(cuda::driver()->StreamSynchronize(stream_), "cuStreamSynchronize");
        batch.clear();
        for (const Copy &c : copies_) {
          const PlannedRequest &r = requests[slots_[c.slot].request];
          if (c.error != 0) {
            outcomes[slots_[c.slot].request] = {0, c.error};
            free_.push_back(c.slot);
          } else {
            batch.push_back(
                {IoOp::write, r.file, slots_[c.slot].data, r.size, r.file_offset, c.slot});
          }
        }
        queue_.submit(batch);
      }
      if (queue_.outstanding() == 0) {
        continue;
      }
      for (const IoCompletion &c : queue_.wait(1)) {
        outcomes[slots_[c.user_data].request] = {c.bytes, c.error};
        free_.push_back(c.user_data);
      }
    }
  }

  // Enqueues copies_ on the stream: one batch call where the driver has it,
  // else (or when the batch is refused) one call per copy, which also tells
  // which copy the driver refuses.  A copy that was refused gets its errno.
  void start_copies() {
    const cuda::Driver &d = *cuda::driver();
    if (copies_.empty()) {
      return;
    }
    if (batch_copies_) {
      copy_dst_.clear();
      copy_src_.clear();
      copy_size_.clear();
      for (const Copy &c : copies_) {
        copy_dst_.push_back(c.dst);
        copy_src_.push_back(c.src);
        copy_size_.push_back(c.size);
      }
      // Sources in stream order: a write's source is GPU memory that work
      // before it on the stream may still produce.
      cuda::MemcpyAttributes attributes;
      std::size_t first = 0;
      const cuda::CUresult batched =
          d.MemcpyBatchAsync(copy_dst_.data(), copy_src_.data(), copy_size_.data(), copies_.size(),
                             &attributes, &first, 1, stream_);
      if (batched == cuda::kSuccess) {
        return;
      }
      if (batched == cuda::kErrorNotSupported) {
        batch_copies_ = false;  // the driver has the call but not for this GPU or platform
      }
      // Copies the refused batch may have enqueued are the same bytes to
      // the same place: doing them again one by one changes nothing.
    }
    for (Copy &c : copies_) {
      // NOLINTBEGIN(performance-no-int-to-ptr): host addresses kept as integers for the batch
      const cuda::CUresult r =
          c.to_gpu
              ? d.MemcpyHtoDAsync(c.dst, reinterpret_cast<const void *>(c.src), c.size, stream_)
              : d.MemcpyDtoHAsync(reinterpret_cast<void *>(c.dst), c.src, c.size, stream_);
      // NOLINTEND(performance-no-int-to-ptr)
      if (r != cuda::kSuccess) {
        (void)d.StreamSynchronize(stream_);
        c.error = cuda::to_errno(r);
      }
    }
  }

  // The read copies just started: their slots are busy until one event,
  // recorded after them, has passed.
  void mark_copying() {
    bool any = false;
    for (const Copy &c : copies_) {
      any = any || c.error == 0;
    }
    if (!any) {
      return;
    }
    cuda::CUevent event = events_[next_event_++ % events_.size()];
    if (const cuda::CUresult r = cuda::driver()->EventRecord(event, stream_); r != cuda::kSuccess) {
      // Without the event the slots cannot tell when their copy is done.
      cuda::check(cuda::driver()->StreamSynchronize(stream_), "cuStreamSynchronize");
      return;
    }
    for (const Copy &c : copies_) {
      if (c.error == 0) {
        slots_[c.slot].event = event;
        slots_[c.slot].copying = true;
      }
    }
  }

  void destroy() noexcept {
    const cuda::Driver &d = *cuda::driver();
    const cuda::ScopedContext scope(gpu_.context());
    if (stream_ != nullptr) {
      (void)d.StreamSynchronize(stream_);
      (void)d.StreamDestroy(stream_);
      stream_ = nullptr;
    }
    for (cuda::CUevent &e : events_) {
      if (e != nullptr) {
        (void)d.EventDestroy(e);
        e = nullptr;
      }
    }
  }

  cuda::Gpu gpu_;
  IoQueue queue_;
  unsigned depth_;
  std::size_t slot_size_;
  cuda::CUstream stream_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<cuda::CUevent> events_;
  std::size_t next_event_ = 0;
  std::deque<std::size_t> free_;
  bool batch_copies_ = false;
  std::vector<Copy> copies_;
  std::vector<cuda::CUdeviceptr> copy_dst_;
  std::vector<cuda::CUdeviceptr> copy_src_;
  std::vector<std::size_t> copy_size_;
  std::vector<char> lost_;  // per request of the current move: its memory was freed
};

}  // namespace

// Memory freed since it was registered (maybe allocated again at the same
// address): its requests fail with EFAULT before anything is copied into
// it.  Requests come grouped by registration, so each is asked once.
void lost_requests(std::span<const PlannedRequest> requests, std::size_t slot_size,
                   std::vector<char> &lost) {
  lost.assign(requests.size(), 0);
  const Registration *checked = nullptr;
  bool checked_lost = false;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const PlannedRequest &r = requests[i];
    if (r.size > slot_size) {
      throw_errno(EINVAL, "gather request of " + std::to_string(r.size) +
                              " bytes exceeds the staging slot of " + std::to_string(slot_size));
    }
    if (r.registration != checked) {
      checked = r.registration;
      const Mapping *mapping = RegistrationAccess::mapping(*r.registration);
      const std::string why = mapping != nullptr ? mapping->lost() : "";
      checked_lost = !why.empty();
      if (checked_lost) {
        log(LogLevel::error, "gather: " + why);
      }
    }
    lost[i] = checked_lost ? 1 : 0;
  }
}

std::unique_ptr<GatherMover> make_staged_mover(int device_id, unsigned depth, std::size_t slot_size,
                                               std::size_t slots) {
  if (cuda::driver() == nullptr) {
    throw_errno(ENOTSUP, "the compat gather needs CUDA: " + cuda::unavailable_reason());
  }
  if (slots == 0) {
    slots = std::size_t{depth} * 2;
  }
  return std::make_unique<StagedMover>(device_id, depth, slot_size, slots);
}

}  // namespace phx::detail

#else  // !PHX_WITH_CUDA

#include <cerrno>

#include "core/error.hpp"

namespace phx::detail {

std::unique_ptr<GatherMover> make_staged_mover(int /*device_id*/, unsigned /*depth*/,
                                               std::size_t /*slot_size*/, std::size_t /*slots*/) {
  throw_errno(ENOTSUP, "the compat gather needs a libphoenix built with CUDA (PHX_WITH_CUDA)");
}

}  // namespace phx::detail

#endif  // PHX_WITH_CUDA
