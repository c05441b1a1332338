// SPDX-License-Identifier: MIT
// One open device: its engine and its registrations.  Shared by phx::Device,
// every phx::Registration made from it and the C API's device table, so it
// lives until the last of them is gone.
#ifndef PHOENIX_LIB_DEVICE_STATE_HPP
#define PHOENIX_LIB_DEVICE_STATE_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/registration_table.hpp"
#include "engines/engine_backend.hpp"
#include "io/stream_io.hpp"

namespace phx::detail {

/// Throws std::system_error(EINVAL) unless 0 <= id < PHXFS_MAX_DEVICES.
void check_device_id(int device_id);

/// The backend for an already resolved engine, from the engine table: the
/// live one of another device with the same id and options where the engine
/// is shared per process (EngineEntry::shared).  Throws.
[[nodiscard]] std::shared_ptr<EngineBackend> make_backend(int device_id, Engine engine,
                                                          const Options &options);

class DeviceState {
 public:
  DeviceState(int id, std::shared_ptr<EngineBackend> backend, std::string reason, Options options);

  /// Validates @p options, resolves the engine and builds the backend.
  /// Throws std::system_error.
  [[nodiscard]] static std::shared_ptr<DeviceState> open(int device_id, const Options &options);

  [[nodiscard]] int id() const noexcept { return id_; }
  [[nodiscard]] Engine engine() const noexcept { return backend_->kind(); }
  [[nodiscard]] EngineCapabilities capabilities() const noexcept {
    return backend_->capabilities();
  }
  [[nodiscard]] const std::string &reason() const noexcept { return reason_; }
  [[nodiscard]] const Options &options() const noexcept { return options_; }
  [[nodiscard]] EngineBackend &backend() const noexcept { return *backend_; }
  [[nodiscard]] RegistrationTable &table() noexcept { return table_; }
  [[nodiscard]] const RegistrationTable &table() const noexcept { return table_; }

  /// Validates, claims the range, maps it and publishes it.  Throws
  /// std::system_error (EINVAL, EEXIST, engine errors).
  [[nodiscard]] std::shared_ptr<Mapping> register_range(const void *address, std::size_t size);
  /// Throws std::system_error(EINVAL) when no registration is exactly that.
  void deregister_range(const void *address, std::size_t size);
  /// Drops @p mapping from the table if it is still there.
  void forget(const Mapping &mapping) noexcept;
  /// Drops every registration (phxfs_close).
  void deregister_all() noexcept;

  /// This device's stream-ordered I/O, made at the first call.  Throws
  /// std::system_error.
  [[nodiscard]] StreamIo &stream_io();

 private:
  int id_;
  std::shared_ptr<EngineBackend> backend_;
  std::string reason_;
  Options options_;
  RegistrationTable table_;
  std::mutex stream_io_mutex_;
  // Last: destroyed first, while the engine it may still call exists.
  std::unique_ptr<StreamIo> stream_io_;
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_DEVICE_STATE_HPP
