// SPDX-License-Identifier: MIT
// The batch API.  Entries run on a pool of worker threads through the same
// synchronous path as cuFileRead/cuFileWrite, so every engine serves them
// (libphoenix's io_uring IoQueue serves only engines with a host view, and
// is one queue per thread).  Any batch size up to max_batch_entries.
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <vector>

#include "cufile_shim/cufile_abi.h"
#include "cufile_shim/errors.hpp"
#include "cufile_shim/io.hpp"
#include "cufile_shim/settings.hpp"
#include "cufile_shim/shim_state.hpp"

namespace phx::cufile_shim {
namespace {

/// Worker threads shared by every batch; started on first use, never
/// stopped (like libphoenix's stream I/O threads), so exit never waits.
class WorkerPool {
 public:
  static WorkerPool &get() {
    static auto *pool = new WorkerPool();  // NOLINT(cppcoreguidelines-owning-memory)
    return *pool;
  }

  void post(std::function<void()> job) {
    {
      const std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  WorkerPool() {
    unsigned started = 0;
    try {
      for (; started < settings().batch_threads; ++started) {
        std::thread([this] { run(); }).detach();
      }
    } catch (...) {
      if (started == 0) {
        throw;  // nothing refers to this object yet
      }
      // Running threads refer to this object: keep it, with fewer threads.
    }
  }
  [[noreturn]] void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return !jobs_.empty(); });
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();  // noexcept by construction
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
};

class Batch : public std::enable_shared_from_this<Batch> {
 public:
  explicit Batch(unsigned capacity) : capacity_(capacity) {}

  void submit(const CUfileIOParams_t *params, unsigned nr) {
    if (nr == 0) {
      return;
    }
    if (params == nullptr || nr > capacity_) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null entries or more than the batch was set up for");
    }
    Shim &shim = Shim::get();
    for (unsigned i = 0; i < nr; ++i) {
      const CUfileIOParams_t &p = params[i];
      if (p.mode != CUFILE_BATCH || (p.opcode != CUFILE_READ && p.opcode != CUFILE_WRITE) ||
          p.u.batch.devPtr_base == nullptr || p.u.batch.file_offset < 0 ||
          p.u.batch.devPtr_offset < 0) {
        throw ShimError(CU_FILE_INVALID_VALUE,
                        "entry " + std::to_string(i) + ": bad mode, opcode, buffer or offset");
      }
      (void)shim.handle(p.fh);  // throws for an unregistered handle
    }
    std::uint64_t generation = 0;
    {
      const std::lock_guard lock(mutex_);
      if (outstanding_ + nr > capacity_) {
        throw ShimError(CU_FILE_BATCH_FULL,
                        std::to_string(outstanding_) + " entries not yet returned by GetStatus");
      }
      outstanding_ += nr;
      running_ += nr;
      generation = generation_;
    }
    unsigned posted = 0;
    try {
      WorkerPool &pool = WorkerPool::get();
      for (; posted < nr; ++posted) {
        pool.post([self = shared_from_this(), p = params[posted], generation]() noexcept {
          self->run(p, generation);
        });
      }
    } catch (...) {
      // Entries never posted are not outstanding.
      const std::lock_guard lock(mutex_);
      outstanding_ -= nr - posted;
      running_ -= nr - posted;
      throw;
    }
  }

  void status(unsigned min_nr, unsigned *nr, CUfileIOEvents_t *events, const timespec *timeout) {
    if (nr == nullptr || (events == nullptr && *nr > 0) || min_nr > *nr) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null count or events, or min_nr > *nr");
    }
    std::unique_lock lock(mutex_);
    auto ready = [&] {
      return done_.size() >= min_nr || done_.size() == static_cast<std::size_t>(outstanding_);
    };
    if (timeout == nullptr) {
      cv_.wait(lock, ready);
    } else {
      const auto wait =
          std::chrono::seconds(timeout->tv_sec) + std::chrono::nanoseconds(timeout->tv_nsec);
      cv_.wait_for(lock, wait, ready);
    }
    unsigned n = 0;
    while (n < *nr && !done_.empty()) {
      events[n++] = done_.front();
      done_.pop_front();
    }
    outstanding_ -= n;
    *nr = n;
  }

  /// Drops queued entries, waits for running ones, forgets every result.
  void cancel() {
    std::unique_lock lock(mutex_);
    ++generation_;
    cv_.wait(lock, [this] { return running_ == 0; });
    done_.clear();
    outstanding_ = 0;
  }

 private:
  void run(const CUfileIOParams_t &p, std::uint64_t generation) noexcept {
    bool live = false;
    {
      const std::lock_guard lock(mutex_);
      live = generation == generation_;
    }
    CUfileIOEvents_t ev{p.cookie, CUFILE_CANCELED, 0};
    if (live) {
      const ssize_t r = transfer(p.opcode == CUFILE_WRITE, p.fh, p.u.batch.devPtr_base,
                                 p.u.batch.size, p.u.batch.file_offset, p.u.batch.devPtr_offset);
      // A failure's ret holds -errno or -CUfileOpError (as size_t).
      const ssize_t ret = r == -1 ? -static_cast<ssize_t>(errno) : r;
      ev.status = r >= 0 ? CUFILE_COMPLETE : CUFILE_FAILED;
      ev.ret = static_cast<std::size_t>(ret);
    }
    {
      const std::lock_guard lock(mutex_);
      if (generation == generation_) {
        done_.push_back(ev);
      }
      --running_;
    }
    cv_.notify_all();
  }

  const unsigned capacity_;
  std::mutex mutex_;
  std::condition_variable cv_;
  unsigned outstanding_ = 0;  // submitted, not yet returned by status()
  unsigned running_ = 0;      // queued or running on a worker
  std::uint64_t generation_ = 0;
  std::deque<CUfileIOEvents_t> done_;
};

class Batches {
 public:
  static Batches &get() {
    static auto *b = new Batches();  // NOLINT(cppcoreguidelines-owning-memory): never destroyed
    return *b;
  }
  void *add(std::shared_ptr<Batch> batch) {
    void *key = batch.get();
    const std::unique_lock lock(mutex_);
    batches_.emplace(key, std::move(batch));
    return key;
  }
  std::shared_ptr<Batch> find(void *key) const {
    const std::shared_lock lock(mutex_);
    auto it = batches_.find(key);
    if (it == batches_.end()) {
      throw ShimError(CU_FILE_INVALID_VALUE, "unknown batch handle");
    }
    return it->second;
  }
  std::shared_ptr<Batch> remove(void *key) {
    const std::unique_lock lock(mutex_);
    auto it = batches_.find(key);
    if (it == batches_.end()) {
      return nullptr;
    }
    auto b = std::move(it->second);
    batches_.erase(it);
    return b;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::map<void *, std::shared_ptr<Batch>> batches_;
};

}  // namespace
}  // namespace phx::cufile_shim

using phx::cufile_shim::Batch;
using phx::cufile_shim::Batches;
using phx::cufile_shim::guarded;
using phx::cufile_shim::ShimError;
using phx::cufile_shim::status;

CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr) {
  return guarded("cuFileBatchIOSetUp", [batch_idp, nr] {
    if (batch_idp == nullptr || nr == 0 || nr > phx::cufile_shim::settings().max_batch_entries) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null handle or batch size out of range");
    }
    phx::cufile_shim::Shim::get().ensure_open();
    *batch_idp = Batches::get().add(std::make_shared<Batch>(nr));
    return status(CU_FILE_SUCCESS);
  });
}

CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr,
                                  CUfileIOParams_t *iocbp, unsigned /*flags*/) {
  return guarded("cuFileBatchIOSubmit", [=] {
    Batches::get().find(batch_idp)->submit(iocbp, nr);
    return status(CU_FILE_SUCCESS);
  });
}

CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
                                     CUfileIOEvents_t *iocbp, struct timespec *timeout) {
  return guarded("cuFileBatchIOGetStatus", [=] {
    Batches::get().find(batch_idp)->status(min_nr, nr, iocbp, timeout);
    return status(CU_FILE_SUCCESS);
  });
}

CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp) {
  return guarded("cuFileBatchIOCancel", [batch_idp] {
    Batches::get().find(batch_idp)->cancel();
    return status(CU_FILE_SUCCESS);
  });
}

void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp) {
  try {
    if (auto b = Batches::get().remove(batch_idp)) {
      b->cancel();
    }
  } catch (...) {  // nothing to report through a void function
  }
}
