// SPDX-License-Identifier: MIT
// One engine's way from a file into memory, as separate steps so each can
// be timed: driver open, file open, buffer allocation, registration, reads,
// deregistration, free, file close, driver close.  The libphoenix engines
// have every step; posix has no driver and no registration (those steps
// return false and do nothing).
#ifndef PHX_E2E_LOADER_HPP
#define PHX_E2E_LOADER_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/engine_spec.hpp"

namespace phx_e2e {

class Loader {
 public:
  Loader() = default;
  Loader(const Loader &) = delete;
  Loader &operator=(const Loader &) = delete;
  Loader(Loader &&) = delete;
  Loader &operator=(Loader &&) = delete;
  virtual ~Loader() = default;

  [[nodiscard]] virtual std::string name() const = 0;
  /// libphoenix's engine, "none" for posix.
  [[nodiscard]] virtual std::string library_engine() const = 0;
  /// Where the bytes land: "gpu", "host" or "device-addr".
  [[nodiscard]] virtual std::string memory() const = 0;

  /// Each returns false when the engine has no such step.
  virtual bool open_driver() = 0;
  virtual bool close_driver() = 0;
  virtual void open_file(const std::string &path) = 0;
  virtual void close_file() = 0;
  /// A buffer of @p bytes, read by up to @p threads threads in pieces of
  /// at most @p piece bytes.
  virtual void allocate(std::size_t bytes, unsigned threads, std::size_t piece) = 0;
  virtual void free_buffer() = 0;
  /// Registers [offset, +bytes) of the buffer; one registration at a time.
  virtual bool register_buffer(std::size_t offset, std::size_t bytes) = 0;
  virtual bool deregister_buffer() = 0;

  /// Reads @p size bytes at @p file_offset to @p buffer_offset of the
  /// buffer (inside the registration, for engines that register), as
  /// thread @p thread.  Thread-safe for distinct threads and ranges.
  /// Returns the bytes read (short only at end of file).
  virtual std::size_t read(unsigned thread, std::size_t buffer_offset, std::size_t size,
                           std::uint64_t file_offset) = 0;
  /// Copies buffer bytes out for --verify (device addresses need the
  /// registration still in place).
  virtual void copy_out(std::size_t buffer_offset, std::span<std::byte> out) const = 0;
};

/// A libphoenix engine (phoenix, compat, gds, host) on device @p device;
/// @p device_addr: register device addresses from there on instead of
/// allocating GPU memory.
[[nodiscard]] std::unique_ptr<Loader> make_libphoenix_loader(
    const phxtools::EngineSpec &spec, phx::Engine engine, int device,
    std::optional<std::uint64_t> device_addr);

/// posix: pread into a host buffer, then cudaMemcpy to GPU @p device when
/// it is usable (host memory only otherwise).
[[nodiscard]] std::unique_ptr<Loader> make_posix_loader(int device);

}  // namespace phx_e2e

#endif  // PHX_E2E_LOADER_HPP
