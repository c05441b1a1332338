// SPDX-License-Identifier: MIT
// The engine interface: how a device range is registered (map) and how bytes
// move between a file and a registered range (transfer).  direct and host
// share the host-view transfer; the CUDA compat engine overrides it.
#ifndef PHOENIX_LIB_ENGINE_BACKEND_HPP
#define PHOENIX_LIB_ENGINE_BACKEND_HPP

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/mapping.hpp"
#include "io/aligned_io.hpp"
#include "phoenix/phoenix.hpp"

namespace phx::detail {

class EngineBackend {
 public:
  EngineBackend() = default;
  virtual ~EngineBackend() = default;
  EngineBackend(const EngineBackend &) = delete;
  EngineBackend &operator=(const EngineBackend &) = delete;
  EngineBackend(EngineBackend &&) = delete;
  EngineBackend &operator=(EngineBackend &&) = delete;

  [[nodiscard]] virtual Engine kind() const noexcept = 0;

  /// Registers [address, address + size).  Throws std::system_error.
  [[nodiscard]] virtual std::shared_ptr<Mapping> map(std::uintptr_t address, std::size_t size) = 0;

  /// Moves @p size bytes between @p fd at @p file_offset and @p mapping at
  /// @p mapping_offset (already bounds-checked).
  [[nodiscard]] virtual TransferResult transfer(Direction dir, int fd, const Mapping &mapping,
                                                std::size_t mapping_offset, std::size_t size,
                                                std::uint64_t file_offset,
                                                const IoPolicy &policy) noexcept {
    return detail::transfer(dir, fd, mapping.host_view() + mapping_offset, size, file_offset,
                            policy);
  }
};

/// Registered memory is ordinary host memory.
[[nodiscard]] std::unique_ptr<EngineBackend> make_host_backend();

/// CUDA GPU without the module (builds with PHX_WITH_CUDA).  Throws ENODEV
/// when the device has no GPU.
[[nodiscard]] std::unique_ptr<EngineBackend> make_compat_backend(int device_id);

class DeviceDriver;
/// Registered memory is device memory mapped by phxfs.ko through @p driver.
[[nodiscard]] std::unique_ptr<EngineBackend> make_direct_backend(
    std::shared_ptr<DeviceDriver> driver);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_ENGINE_BACKEND_HPP
