// SPDX-License-Identifier: MIT
// The engine interface.  An engine decides how a device range is registered
// (map) and how bytes move between a file and a registered range
// (transfer), and states what else it can do (capabilities(): its row of
// the engine table, engine_table.hpp).  Callers ask capabilities, never the
// kind; what an engine lacks is refused through refuse() (ENOTSUP).
#ifndef PHOENIX_LIB_ENGINES_ENGINE_BACKEND_HPP
#define PHOENIX_LIB_ENGINES_ENGINE_BACKEND_HPP

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/mapping.hpp"
#include "io/aligned_io.hpp"
#include "phoenix/phoenix.hpp"

struct CUstream_st;

namespace phx::detail {

/// One piece of an engine's own batch: offsets from the registration's start.
struct BatchPiece {
  std::size_t buffer_offset = 0;
  std::uint64_t file_offset = 0;
  std::size_t size = 0;
};

/// An engine's own stream-ordered operation reads these when the stream
/// reaches it, so the caller keeps them until the stream is synchronised.
struct StreamParams {
  std::size_t size = 0;
  off_t file_offset = 0;
  off_t buffer_offset = 0;
  ssize_t bytes_done = 0;
};

class EngineBackend {
 public:
  EngineBackend() = default;
  virtual ~EngineBackend() = default;
  EngineBackend(const EngineBackend &) = delete;
  EngineBackend &operator=(const EngineBackend &) = delete;
  EngineBackend(EngineBackend &&) = delete;
  EngineBackend &operator=(EngineBackend &&) = delete;

  [[nodiscard]] virtual Engine kind() const noexcept = 0;
  /// What this engine can do (engine_table.cpp).
  [[nodiscard]] EngineCapabilities capabilities() const noexcept;

  /// Registers [address, address + size).  Throws std::system_error.
  [[nodiscard]] virtual std::shared_ptr<Mapping> map(std::uintptr_t address, std::size_t size) = 0;

  /// Moves @p size bytes between @p fd at @p file_offset and @p mapping at
  /// @p mapping_offset (already bounds-checked).  The default moves them
  /// through the host view.
  [[nodiscard]] virtual TransferResult transfer(Direction dir, int fd, const Mapping &mapping,
                                                std::size_t mapping_offset, std::size_t size,
                                                std::uint64_t file_offset,
                                                const IoPolicy &policy) noexcept {
    return detail::transfer(dir, fd, mapping.host_view() + mapping_offset, size, file_offset,
                            policy);
  }

  /// Runs @p pieces through the engine's own batch API (cufile:
  /// cuFileBatchIO*) on @p fd against @p mapping.  Returns the bytes of all
  /// pieces, or the first failure.  Engines without one refuse (ENOTSUP).
  [[nodiscard]] virtual TransferResult native_batch(Direction dir, int fd, const Mapping &mapping,
                                                    std::span<const BatchPiece> pieces);

  /// Enqueues @p params on @p stream through the engine's own stream API
  /// (cufile: cuFileReadAsync/WriteAsync).  Engines without one refuse
  /// (ENOTSUP); phx::File::read_async serves every engine.
  virtual void native_submit_async(Direction dir, int fd, const Mapping &mapping,
                                   StreamParams &params, CUstream_st *stream);
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_ENGINES_ENGINE_BACKEND_HPP
