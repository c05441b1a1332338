// SPDX-License-Identifier: MIT
// The reader-threads mover for a compat GPU's cold reads: N threads take
// the requests in order from one cursor (or, with stripes, each its own
// contiguous stripe of them, so that no two reads in flight are
// neighbours the block layer could merge); each reads one request at a time
// with a synchronous pread into one of its own two pinned slots and starts
// its copy to the GPU on its own stream, then reads the next into the other
// slot while that copy runs.  The disk sees N reads at once, each started
// and completed on the thread (and so the core) that copies it.  Reads
// only: a loader's files.  One file for both builds: without CUDA it only
// says ENOTSUP.
#include "gather/gather_mover.hpp"
#include "phoenix/config.h"

#if PHX_WITH_CUDA

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "cuda/driver_api.hpp"
#include "cuda/gpu.hpp"
#include "engines/compat/staging_pool.hpp"

namespace phx::detail {
namespace {

class ReaderThreadsMover final : public GatherMover {
 public:
  ReaderThreadsMover(int device_id, unsigned threads, std::size_t slot_size, bool stripes)
      : gpu_(device_id), slot_size_(slot_size), stripes_(stripes), readers_(threads) {
    const cuda::Driver &d = *cuda::driver();
    const cuda::ScopedContext scope(gpu_.context());
    for (Reader &r : readers_) {
      cuda::CUresult result = d.StreamCreate(&r.stream, cuda::kStreamNonBlocking);
      for (Slot &s : r.slots) {
        if (result == cuda::kSuccess) {
          result = d.EventCreate(&s.event, cuda::kEventBlockingSync | cuda::kEventDisableTiming);
        }
      }
      if (result != cuda::kSuccess) {
        destroy();
        cuda::check(result, "reader threads: cuStreamCreate/cuEventCreate");
      }
    }
  }
  ~ReaderThreadsMover() override { destroy(); }
  ReaderThreadsMover(const ReaderThreadsMover &) = delete;
  ReaderThreadsMover &operator=(const ReaderThreadsMover &) = delete;
  ReaderThreadsMover(ReaderThreadsMover &&) = delete;
  ReaderThreadsMover &operator=(ReaderThreadsMover &&) = delete;

  void move(Direction dir, std::span<const PlannedRequest> requests,
            std::span<RequestOutcome> outcomes) override {
    if (dir != Direction::read) {
      throw_errno(ENOTSUP, "the reader-threads mover only reads");
    }
    lost_requests(requests, slot_size_, lost_);
    std::atomic<std::size_t> shared{0};
    std::atomic<bool> stop{false};
    std::mutex failure_mutex;
    std::exception_ptr failure;
    {
      std::vector<std::jthread> threads;
      threads.reserve(readers_.size());
      const std::size_t n = requests.size();
      const std::size_t t = readers_.size();
      for (std::size_t k = 0; k < t; ++k) {
        const Cursor cursor = stripes_ ? Cursor{nullptr, n * k / t, n * (k + 1) / t, &stop}
                                       : Cursor{&shared, 0, n, &stop};
        threads.emplace_back([&, r = &readers_[k], cursor]() noexcept {
          try {
            run_reader(*r, requests, outcomes, cursor);
          } catch (...) {
            const std::lock_guard lock(failure_mutex);
            if (!failure) {
              failure = std::current_exception();
            }
            stop = true;  // the others stop after their read
          }
        });
      }
    }  // joined; every reader synchronised its stream
    if (failure) {
      std::rethrow_exception(failure);
    }
  }

 private:
  struct Slot {
    PinnedBuffer buffer;  // pinned by its reader when first used
    cuda::CUevent event = nullptr;
    bool copying = false;
  };
  struct Reader {
    cuda::CUstream stream = nullptr;
    std::array<Slot, 2> slots;
  };
  // Hands a reader its next request: from the cursor all readers share
  // (file order), or from its own stripe of the requests.
  struct Cursor {
    std::atomic<std::size_t> *shared = nullptr;
    std::size_t next = 0;
    std::size_t end = 0;
    const std::atomic<bool> *stop = nullptr;
    [[nodiscard]] bool take(std::size_t &index) {
      if (stop->load(std::memory_order_relaxed)) {
        return false;
      }
      index = shared != nullptr ? shared->fetch_add(1) : next++;
      return index < end;
    }
  };

  // Reads @p r into @p data; the bytes read (fewer only at end of file) or -errno.
  static long read_request(const PlannedRequest &r, std::byte *data) noexcept {
    std::size_t done = 0;
    while (done < r.size) {
      const ssize_t n = ::pread(r.file->fd(), data + done, r.size - done,
                                static_cast<off_t>(r.file_offset + done));
      if (n < 0) {
        if (errno == EINTR) {
          continue;
        }
        return -errno;
      }
      if (n == 0) {
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    return static_cast<long>(done);
  }

  void run_reader(Reader &reader, std::span<const PlannedRequest> requests,
                  std::span<RequestOutcome> outcomes, Cursor cursor) {
    const cuda::Driver &d = *cuda::driver();
    const cuda::ScopedContext scope(gpu_.context());
    std::size_t k = 0;
    std::size_t i = 0;
    while (cursor.take(i)) {
      if (lost_[i] != 0) {
        outcomes[i] = {0, EFAULT};
        continue;
      }
      Slot &slot = reader.slots[k];
      k ^= 1U;
      if (slot.copying) {
        cuda::check(cuda::wait_event(slot.event), "cuEventSynchronize");
        slot.copying = false;
      }
      if (slot.buffer.data() == nullptr) {
        slot.buffer = PinnedBuffer(slot_size_);
      }
      const PlannedRequest &r = requests[i];
      const long got = read_request(r, slot.buffer.data());
      if (got < 0) {
        outcomes[i] = {0, static_cast<int>(-got)};
        continue;
      }
      const auto bytes = static_cast<std::size_t>(got);
      outcomes[i] = {bytes, 0};
      if (bytes == 0) {
        continue;
      }
      const cuda::CUdeviceptr dst =
          reinterpret_cast<std::uintptr_t>(r.registration->device_address()) + r.reg_offset;
      if (const cuda::CUresult c = d.MemcpyHtoDAsync(dst, slot.buffer.data(), bytes, reader.stream);
          c != cuda::kSuccess) {
        (void)d.StreamSynchronize(reader.stream);
        outcomes[i] = {0, cuda::to_errno(c)};
        continue;
      }
      if (d.EventRecord(slot.event, reader.stream) != cuda::kSuccess) {
        cuda::check(d.StreamSynchronize(reader.stream), "cuStreamSynchronize");
      } else {
        slot.copying = true;
      }
      count_read(bytes);
    }
    cuda::check(d.StreamSynchronize(reader.stream), "cuStreamSynchronize");
    for (Slot &s : reader.slots) {
      s.copying = false;
    }
  }

  void destroy() noexcept {
    const cuda::Driver &d = *cuda::driver();
    const cuda::ScopedContext scope(gpu_.context());
    for (Reader &r : readers_) {
      if (r.stream != nullptr) {
        (void)d.StreamSynchronize(r.stream);
        (void)d.StreamDestroy(r.stream);
        r.stream = nullptr;
      }
      for (Slot &s : r.slots) {
        if (s.event != nullptr) {
          (void)d.EventDestroy(s.event);
          s.event = nullptr;
        }
      }
    }
  }

  cuda::Gpu gpu_;
  std::size_t slot_size_;
  bool stripes_;
  std::vector<Reader> readers_;
  std::vector<char> lost_;  // per request of the current move: its memory was freed
};

}  // namespace

std::unique_ptr<GatherMover> make_reader_threads_mover(int device_id, unsigned threads,
                                                       std::size_t slot_size, bool stripes) {
  if (cuda::driver() == nullptr) {
    throw_errno(ENOTSUP, "the compat reader threads need CUDA: " + cuda::unavailable_reason());
  }
  if (threads == 0) {
    throw_errno(EINVAL, "the reader-threads mover needs at least one thread");
  }
  return std::make_unique<ReaderThreadsMover>(device_id, threads, slot_size, stripes);
}

}  // namespace phx::detail

#else  // !PHX_WITH_CUDA

#include <cerrno>

#include "core/error.hpp"

namespace phx::detail {

std::unique_ptr<GatherMover> make_reader_threads_mover(int /*device_id*/, unsigned /*threads*/,
                                                       std::size_t /*slot_size*/,
                                                       bool /*stripes*/) {
  throw_errno(ENOTSUP, "the compat reader threads need a libphoenix built with CUDA");
}

}  // namespace phx::detail

#endif  // PHX_WITH_CUDA
