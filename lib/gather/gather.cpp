// SPDX-License-Identifier: MIT
#include <cerrno>
#include <string>
#include <utility>

#include "core/config.hpp"
#include "core/error.hpp"
#include "engines/engine_table.hpp"
#include "gather/gather_run.hpp"
#include "gather/gatherer.hpp"
#include "phoenix/gather.hpp"

namespace phx {
namespace detail {
namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kDefaultHostViewRequest = std::size_t{1} << 20;
// Small enough that the staging ring (2 x depth slots) stays tens of MiB.
constexpr std::size_t kDefaultStagedRequest = std::size_t{256} << 10;

GatherOptions resolve(Engine engine, const EngineCapabilities &caps, GatherOptions options,
                      const Options &device_options) {
  if (!caps.gather) {
    refuse(engine, "phx::Gather", "gather mover", "use File::read/write");
  }
  if (options.max_request == 0) {
    options.max_request = caps.staged ? kDefaultStagedRequest : kDefaultHostViewRequest;
  }
  if (options.max_request > kMaxSyscallBytes) {
    throw_errno(EINVAL, "gather max_request " + std::to_string(options.max_request) +
                            " exceeds the 1 GiB a request can carry");
  }
  options.max_request = (options.max_request + kPage - 1) / kPage * kPage;
  if (options.queue_depth == 0) {
    options.queue_depth = device_options.queue_depth;
  } else if (options.queue_depth > 32768) {
    throw_errno(EINVAL, "gather queue_depth " + std::to_string(options.queue_depth) +
                            " exceeds io_uring's 32768 entries");
  }
  return options;
}

GatherResult all_failed(std::size_t entries, int error) {
  GatherResult r;
  r.entries = entries;
  r.failures.reserve(entries);
  for (std::size_t i = 0; i < entries; ++i) {
    r.failures.push_back({i, error, 0});
  }
  return r;
}

int error_of(const std::exception_ptr &e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error &s) {
    return s.code().value();
  } catch (const std::bad_alloc &) {
    return ENOMEM;
  } catch (...) {
    return EIO;
  }
}

}  // namespace

Gatherer::Gatherer(int device_id, Engine engine, EngineCapabilities capabilities,
                   GatherOptions options, const Options &device_options)
    : device_id_(device_id),
      capabilities_(capabilities),
      options_(resolve(engine, capabilities, options, device_options)) {}

Gatherer::~Gatherer() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void Gatherer::post(std::function<void(GatherMover *, const std::exception_ptr &)> job) {
  {
    const std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { worker(); });
    }
  }
  wake_.notify_one();
}

bool Gatherer::on_own_thread() {
  const std::lock_guard lock(mutex_);
  return thread_.joinable() && thread_.get_id() == std::this_thread::get_id();
}

void Gatherer::worker() noexcept {
  for (;;) {
    std::function<void(GatherMover *, const std::exception_ptr &)> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) {
        return;  // stopping, and every posted operation has run
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    if (mover_ == nullptr && mover_error_ == nullptr) {
      try {
        mover_ = capabilities_.staged
                     ? make_staged_mover(device_id_, options_.queue_depth, options_.max_request)
                     : make_host_view_mover(options_.queue_depth);
      } catch (...) {
        mover_error_ = std::current_exception();
      }
    }
    job(mover_.get(), mover_error_);
  }
}

}  // namespace detail

namespace {

using detail::Direction;

std::future<GatherResult> start(detail::Gatherer &g, Direction dir,
                                std::vector<GatherEntry> entries) {
  detail::validate_entries(entries);
  auto promise = std::make_shared<std::promise<GatherResult>>();
  std::future<GatherResult> future = promise->get_future();
  g.post([&g, dir, promise, entries = std::move(entries)](detail::GatherMover *mover,
                                                          const std::exception_ptr &error) {
    if (mover == nullptr) {
      promise->set_exception(error);
      return;
    }
    try {
      promise->set_value(
          detail::run_gather(*mover, dir, entries, g.options().max_request, g.options().merge));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return future;
}

// A synchronous call from a callback would wait for an operation queued
// behind the one running it.
void check_not_in_callback(detail::Gatherer &g) {
  if (g.on_own_thread()) {
    detail::throw_errno(EDEADLK,
                        "phx::Gather::read/write called from a gather callback would wait for "
                        "itself; use read_async/write_async there");
  }
}

void start(detail::Gatherer &g, Direction dir, std::vector<GatherEntry> entries,
           std::function<void(GatherResult)> done) {
  detail::validate_entries(entries);
  g.post([&g, dir, done = std::move(done), entries = std::move(entries)](
             detail::GatherMover *mover, const std::exception_ptr &error) {
    GatherResult result;
    try {
      if (mover == nullptr) {
        std::rethrow_exception(error);
      }
      result = detail::run_gather(*mover, dir, entries, g.options().max_request, g.options().merge);
    } catch (...) {
      result = detail::all_failed(entries.size(), detail::error_of(std::current_exception()));
    }
    done(std::move(result));
  });
}

}  // namespace

GatherEntry entry_at(File &file, const Registration &registration, const void *device_address,
                     std::size_t size, std::uint64_t file_offset) {
  const auto base = reinterpret_cast<std::uintptr_t>(registration.device_address());
  const auto address = reinterpret_cast<std::uintptr_t>(device_address);
  if (!registration || address < base || address - base > registration.size() ||
      size > registration.size() - (address - base)) {
    detail::throw_errno(EINVAL, detail::describe_io("gather", file.path(), file_offset, size) +
                                    ": device address is not inside the registration");
  }
  return {&file, &registration, address - base, file_offset, size};
}

std::vector<GatherEntry> paged_blocks(File &file, const Registration &pool, std::size_t block_size,
                                      std::span<const std::uint64_t> file_blocks,
                                      std::span<const std::uint64_t> pool_slots) {
  if (file_blocks.size() != pool_slots.size() || block_size == 0) {
    detail::throw_errno(EINVAL, "paged_blocks: " + std::to_string(file_blocks.size()) +
                                    " file blocks for " + std::to_string(pool_slots.size()) +
                                    " pool slots of " + std::to_string(block_size) + " bytes");
  }
  const std::uint64_t slots = pool.size() / block_size;
  std::vector<GatherEntry> entries;
  entries.reserve(file_blocks.size());
  for (std::size_t i = 0; i < file_blocks.size(); ++i) {
    if (pool_slots[i] >= slots) {
      detail::throw_errno(EINVAL, "paged_blocks: slot " + std::to_string(pool_slots[i]) +
                                      " is outside the pool's " + std::to_string(slots) +
                                      " slots of " + std::to_string(block_size) + " bytes");
    }
    entries.push_back({&file, &pool, static_cast<std::size_t>(pool_slots[i] * block_size),
                       file_blocks[i] * block_size, block_size});
  }
  return entries;
}

Gather::Gather(const Device &device, GatherOptions options)
    : impl_(std::make_unique<detail::Gatherer>(device.id(), device.engine(), device.capabilities(),
                                               options, device.options())) {}
Gather::Gather(Gather &&) noexcept = default;
Gather &Gather::operator=(Gather &&) noexcept = default;
Gather::~Gather() = default;

detail::Gatherer &Gather::impl() const {
  if (impl_ == nullptr) {
    detail::throw_errno(EINVAL, "phx::Gather was moved from");
  }
  return *impl_;
}

const GatherOptions &Gather::options() const {
  return impl().options();
}

void Gather::prepare() {
  detail::Gatherer &g = impl();
  check_not_in_callback(g);
  std::promise<void> ready;
  std::future<void> done = ready.get_future();
  g.post([&ready](detail::GatherMover *mover, const std::exception_ptr &error) {
    if (mover == nullptr) {
      ready.set_exception(error);
    } else {
      ready.set_value();
    }
  });
  done.get();
}

GatherResult Gather::read(std::span<const GatherEntry> entries) {
  check_not_in_callback(impl());
  return start(impl(), Direction::read, {entries.begin(), entries.end()}).get();
}
GatherResult Gather::write(std::span<const GatherEntry> entries) {
  check_not_in_callback(impl());
  return start(impl(), Direction::write, {entries.begin(), entries.end()}).get();
}
std::future<GatherResult> Gather::read_async(std::vector<GatherEntry> entries) {
  return start(impl(), Direction::read, std::move(entries));
}
std::future<GatherResult> Gather::write_async(std::vector<GatherEntry> entries) {
  return start(impl(), Direction::write, std::move(entries));
}
void Gather::read_async(std::vector<GatherEntry> entries, std::function<void(GatherResult)> done) {
  start(impl(), Direction::read, std::move(entries), std::move(done));
}
void Gather::write_async(std::vector<GatherEntry> entries, std::function<void(GatherResult)> done) {
  start(impl(), Direction::write, std::move(entries), std::move(done));
}
void Gather::read_on_stream(std::vector<GatherEntry> entries, GatherResult *result,
                            CUstream_st *stream) {
  detail::validate_entries(entries);
  detail::post_stream_ordered(impl(), Direction::read, std::move(entries), result, stream);
}
void Gather::write_on_stream(std::vector<GatherEntry> entries, GatherResult *result,
                             CUstream_st *stream) {
  detail::validate_entries(entries);
  detail::post_stream_ordered(impl(), Direction::write, std::move(entries), result, stream);
}

}  // namespace phx
