// SPDX-License-Identifier: MIT
#include "core/device_state.hpp"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "core/error.hpp"
#include "core/log.hpp"

namespace phx::detail {
namespace {

std::string describe_range(int device_id, const void *address, std::size_t size) {
  char text[64] = {};
  (void)std::snprintf(text, sizeof(text), "%p", address);
  return "device " + std::to_string(device_id) + ": range " + text + " + " + std::to_string(size);
}

// Stream-ordered I/O's limits from the device's options.
StreamLimits stream_limits(const Options &options) {
  StreamLimits limits;
  limits.workers = options.stream_workers;
  limits.lanes = options.stream_lanes;
  limits.staging_bytes = options.stream_staging_bytes;
  limits.chunk = options.copy_chunk;
  limits.direct_chunk = options.copy_direct_chunk;
  // Twice the copy threads' depth, as before the limits existed.
  limits.depth = std::clamp<std::size_t>(std::size_t{options.copy_depth} * 2, 2, 8);
  return limits;
}

}  // namespace

DeviceState::DeviceState(int id, std::shared_ptr<EngineBackend> backend, std::string reason,
                         Options options)
    : id_(id), backend_(std::move(backend)), reason_(std::move(reason)), options_(options) {}

std::shared_ptr<DeviceState> DeviceState::open(int device_id, const Options &options) {
  options.validate();
  const EngineChoice choice = choose_engine(device_id, options.engine);
  auto state = std::make_shared<DeviceState>(
      device_id, make_backend(device_id, choice.engine, options), choice.reason, options);
  if (log_enabled(LogLevel::info)) {
    log(LogLevel::info, "device " + std::to_string(device_id) + ": " +
                            std::string(to_string(choice.engine)) + " engine (" + choice.reason +
                            ")");
  }
  return state;
}

std::shared_ptr<Mapping> DeviceState::register_range(const void *address, std::size_t size) {
  if (address == nullptr) {
    throw_errno(EINVAL, describe_range(id_, address, size) + ": null address");
  }
  if (size == 0) {
    throw_errno(EINVAL, describe_range(id_, address, size) + ": zero length");
  }
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  if (start + size < start) {
    throw_errno(EINVAL, describe_range(id_, address, size) + ": wraps the address space");
  }
  if (const int err = table_.reserve(start, size); err != 0) {
    throw_errno(err,
                describe_range(id_, address, size) +
                    (err == EEXIST ? ": already registered" : ": overlaps a live registration"));
  }
  try {
    auto mapping = backend_->map(start, size);
    table_.publish(mapping);
    return mapping;
  } catch (...) {
    table_.cancel(start);
    throw;
  }
}

void DeviceState::deregister_range(const void *address, std::size_t size) {
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  if (!table_.remove(start, size)) {
    throw_errno(EINVAL, describe_range(id_, address, size) + ": not registered");
  }
}

void DeviceState::forget(const Mapping &mapping) noexcept {
  (void)table_.remove(mapping.device_address(), mapping.size(), &mapping);
}

void DeviceState::deregister_all() noexcept {
  (void)table_.clear();
}

StreamIo &DeviceState::stream_io() {
  const std::lock_guard lock(stream_io_mutex_);
  if (!stream_io_) {
    // Where the limits enter: phx::Options will supply them here.
    stream_io_ = std::make_unique<StreamIo>(id_, stream_limits(options_));
  }
  return *stream_io_;
}

}  // namespace phx::detail
