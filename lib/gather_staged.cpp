// SPDX-License-Identifier: MIT
// The gather mover for the compat engine: io_uring reads into pinned
// staging slots, each completion starts its slot's copy to the GPU at once
// (cuMemcpyHtoDAsync on the mover's stream), and a slot is reused when its
// copy's event has passed, so the file reads and the PCIe copies overlap.
// Writes copy a batch of slots from the GPU, wait once, then write them.
// One file for both builds: without CUDA it only says ENOTSUP.
#include "gather_mover.hpp"
#include "phoenix/config.h"

#if PHX_WITH_CUDA

#include <cerrno>
#include <deque>
#include <string>
#include <vector>

#include "compat_mapping.hpp"
#include "cuda/driver_api.hpp"
#include "cuda/gpu.hpp"
#include "error.hpp"
#include "log.hpp"
#include "registration_access.hpp"
#include "staging_pool.hpp"

namespace phx::detail {
namespace {

class StagedMover final : public GatherMover {
 public:
  StagedMover(int device_id, unsigned depth, std::size_t slot_size)
      : gpu_(device_id), queue_(depth), depth_(depth), slot_size_(slot_size) {
    const cuda::Driver &d = *cuda::driver();
    const cuda::ScopedContext scope(gpu_.context());
    const std::size_t count = std::size_t{depth} * 2;
    staging_ = PinnedBuffer(count * slot_size_);
    cuda::check(d.StreamCreate(&stream_, cuda::kStreamNonBlocking), "cuStreamCreate");
    slots_.resize(count);
    events_.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      slots_[i].data = staging_.data() + i * slot_size_;
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
    // Memory freed since it was registered (maybe allocated again at the
    // same address): its requests fail with EFAULT before anything is
    // copied into it.  Requests come grouped by registration.
    lost_.assign(requests.size(), 0);
    const Registration *checked = nullptr;
    bool checked_lost = false;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const PlannedRequest &r = requests[i];
      if (r.size > slot_size_) {
        throw_errno(EINVAL, "gather request of " + std::to_string(r.size) +
                                " bytes exceeds the staging slot of " + std::to_string(slot_size_));
      }
      if (r.registration != checked) {
        checked = r.registration;
        const Mapping *mapping = RegistrationAccess::mapping(*r.registration);
        const std::string lost = mapping != nullptr ? compat_allocation_lost(*mapping) : "";
        checked_lost = !lost.empty();
        if (checked_lost) {
          log(LogLevel::error, "gather: " + lost);
        }
      }
      lost_[i] = checked_lost ? 1 : 0;
    }
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
    std::byte *data = nullptr;
    cuda::CUevent event = nullptr;
    bool copying = false;
    std::size_t request = 0;
  };

  static cuda::CUdeviceptr device_address(const PlannedRequest &r) {
    return reinterpret_cast<std::uintptr_t>(r.registration->device_address()) + r.reg_offset;
  }

  // The oldest free slot, once its last copy has finished.
  std::size_t take_slot() {
    const std::size_t s = free_.front();
    free_.pop_front();
    if (slots_[s].copying) {
      cuda::check(cuda::wait_event(slots_[s].event), "cuEventSynchronize");
      slots_[s].copying = false;
    }
    return s;
  }

  void read(std::span<const PlannedRequest> requests, std::span<RequestOutcome> outcomes) {
    const cuda::Driver &d = *cuda::driver();
    std::vector<IoRequest> batch;
    std::vector<std::size_t> copied;
    std::size_t next = 0;
    while (next < requests.size() || queue_.outstanding() > 0) {
      batch.clear();
      while (next < requests.size() && !free_.empty() &&
             queue_.outstanding() + batch.size() < depth_) {
        if (lost_[next] != 0) {
          outcomes[next++] = {0, EFAULT};
          continue;
        }
        const std::size_t s = take_slot();
        const PlannedRequest &r = requests[next];
        slots_[s].request = next++;
        batch.push_back({IoOp::read, r.file, slots_[s].data, r.size, r.file_offset, s});
      }
      queue_.submit(batch);
      copied.clear();
      for (const IoCompletion &c : queue_.wait(1)) {
        Slot &s = slots_[c.user_data];
        RequestOutcome &o = outcomes[s.request];
        o = {c.bytes, c.error};
        if (c.bytes > 0) {
          if (const cuda::CUresult r =
                  d.MemcpyHtoDAsync(device_address(requests[s.request]), s.data, c.bytes, stream_);
              r != cuda::kSuccess) {
            (void)d.StreamSynchronize(stream_);
            o = {0, cuda::to_errno(r)};
          } else {
            copied.push_back(c.user_data);
          }
        }
        free_.push_back(c.user_data);
      }
      if (!copied.empty()) {
        cuda::CUevent event = events_[next_event_++ % events_.size()];
        if (const cuda::CUresult r = d.EventRecord(event, stream_); r != cuda::kSuccess) {
          // Without the event the slots cannot tell when their copy is done.
          cuda::check(d.StreamSynchronize(stream_), "cuStreamSynchronize");
        } else {
          for (const std::size_t slot : copied) {
            slots_[slot].event = event;
            slots_[slot].copying = true;
          }
        }
      }
    }
  }

  void write(std::span<const PlannedRequest> requests, std::span<RequestOutcome> outcomes) {
    const cuda::Driver &d = *cuda::driver();
    std::vector<IoRequest> batch;
    std::size_t next = 0;
    while (next < requests.size() || queue_.outstanding() > 0) {
      batch.clear();
      while (next < requests.size() && !free_.empty() &&
             queue_.outstanding() + batch.size() < depth_) {
        if (lost_[next] != 0) {
          outcomes[next++] = {0, EFAULT};
          continue;
        }
        const std::size_t s = take_slot();
        const PlannedRequest &r = requests[next];
        slots_[s].request = next;
        if (const cuda::CUresult c =
                d.MemcpyDtoHAsync(slots_[s].data, device_address(r), r.size, stream_);
            c != cuda::kSuccess) {
          outcomes[next++] = {0, cuda::to_errno(c)};
          free_.push_back(s);
          continue;
        }
        ++next;
        batch.push_back({IoOp::write, r.file, slots_[s].data, r.size, r.file_offset, s});
      }
      if (!batch.empty()) {
        // One wait for the whole batch's copies before any of it is written.
        cuda::check(d.StreamSynchronize(stream_), "cuStreamSynchronize");
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
  PinnedBuffer staging_;
  cuda::CUstream stream_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<cuda::CUevent> events_;
  std::size_t next_event_ = 0;
  std::deque<std::size_t> free_;
  std::vector<char> lost_;  // per request of the current move: its memory was freed
};

}  // namespace

std::unique_ptr<GatherMover> make_staged_mover(int device_id, unsigned depth,
                                               std::size_t slot_size) {
  if (cuda::driver() == nullptr) {
    throw_errno(ENOTSUP, "the compat gather needs CUDA: " + cuda::unavailable_reason());
  }
  return std::make_unique<StagedMover>(device_id, depth, slot_size);
}

}  // namespace phx::detail

#else  // !PHX_WITH_CUDA

#include <cerrno>

#include "error.hpp"

namespace phx::detail {

std::unique_ptr<GatherMover> make_staged_mover(int /*device_id*/, unsigned /*depth*/,
                                               std::size_t /*slot_size*/) {
  throw_errno(ENOTSUP, "the compat gather needs a libphoenix built with CUDA (PHX_WITH_CUDA)");
}

}  // namespace phx::detail

#endif  // PHX_WITH_CUDA
