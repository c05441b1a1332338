// SPDX-License-Identifier: MIT
// An engine is how phxbench moves bytes between a file and a buffer: one
// implementation per file (engine_*.cpp), found by name in engine_table().
// The runner never asks which engine it drives; it asks the engine for one
// ThreadIo per worker thread and calls it per request.
#ifndef PHXBENCH_ENGINE_HPP
#define PHXBENCH_ENGINE_HPP

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "common/unavailable.hpp"
#include "options.hpp"
#include "phoenix/phoenix.hpp"

namespace phxbench {

/// The engine or mode cannot run in this build or on this machine (exit 2).
using phxtools::Unavailable;

/// What an engine turned out to be once opened, for the report.
struct EngineInfo {
  std::string library_engine;  ///< libphoenix's engine ("host", "direct", ...), "none" for posix
  std::string memory;          ///< where the buffers live: "host" or "gpu"
  std::string detail;          ///< e.g. the library's reason, the GPU's name
};

/// One worker thread's buffers and I/O: a buffer of `slots` slots, each
/// slot_stride(slot_size) bytes apart; a request names a slot.  Not shared
/// between threads.
class ThreadIo {
 public:
  ThreadIo() = default;
  ThreadIo(const ThreadIo &) = delete;
  ThreadIo &operator=(const ThreadIo &) = delete;
  ThreadIo(ThreadIo &&) = delete;
  ThreadIo &operator=(ThreadIo &&) = delete;
  virtual ~ThreadIo() = default;

  /// Throws Unavailable when @p mode is not something this buffer can do.
  /// Default: sync, async and batch.
  virtual void check_mode(Mode mode) const;

  /// One blocking transfer (sync mode).  Returns the bytes moved; throws on error.
  virtual std::size_t transfer(IoDir dir, unsigned slot, std::size_t size,
                               std::uint64_t offset) = 0;

  /// An io_uring request for a slot (async and batch modes).  Throws
  /// Unavailable when the engine has no host view io_uring could use.
  [[nodiscard]] virtual phx::IoRequest request(IoDir dir, unsigned slot, std::size_t size,
                                               std::uint64_t offset, std::uint64_t user_data) = 0;
  /// Called before a request() write is submitted and after a request()
  /// read completed (posix moves its host slot to or from the GPU here).
  virtual void before_write(unsigned /*slot*/, std::size_t /*size*/) {}
  virtual void after_read(unsigned /*slot*/, std::size_t /*bytes*/) {}

  /// Stream-ordered transfer on @p stream (stream mode); *@p done receives
  /// the bytes or -errno when the stream passes it.  Default: Unavailable.
  virtual void enqueue(IoDir dir, unsigned slot, std::size_t size, std::uint64_t offset,
                       ssize_t *done, CUstream_st *stream);

  /// Copies @p data into a slot (write data) / a slot out to @p out (verify),
  /// wherever the slot's memory is.
  virtual void load(unsigned slot, std::span<const std::byte> data) = 0;
  virtual void store(unsigned slot, std::span<std::byte> out) = 0;
};

class Engine {
 public:
  Engine() = default;
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;
  Engine(Engine &&) = delete;
  Engine &operator=(Engine &&) = delete;
  virtual ~Engine() = default;

  [[nodiscard]] virtual EngineInfo info() const = 0;
  /// A worker's buffers (slots x slot_size bytes) on @p file.
  [[nodiscard]] virtual std::unique_ptr<ThreadIo> open_thread(phx::File &file,
                                                              std::size_t slot_size,
                                                              unsigned slots) = 0;
  /// The CUDA device streams should be created on, or -1 without a GPU.
  [[nodiscard]] virtual int cuda_device() const noexcept { return -1; }
};

/// Distance between slots: a slot size rounded up to 4 KiB, so every slot
/// meets O_DIRECT's memory alignment.
[[nodiscard]] constexpr std::size_t slot_stride(std::size_t slot_size) noexcept {
  constexpr std::size_t kPage = 4096;
  return (slot_size + kPage - 1) / kPage * kPage;
}

struct EngineEntry {
  std::string_view name;
  std::string_view summary;
  /// Opens the engine for @p options; throws Unavailable with the reason.
  std::unique_ptr<Engine> (*make)(const Options &options);
};

/// Every engine, in the order --help lists them, by its canonical name.
[[nodiscard]] std::span<const EngineEntry> engine_table() noexcept;
/// The engine @p name names, old spellings ("phoenix", "gds") included.
[[nodiscard]] const EngineEntry *find_engine(std::string_view name);

[[nodiscard]] std::unique_ptr<Engine> make_posix_engine(const Options &options);

}  // namespace phxbench

#endif  // PHXBENCH_ENGINE_HPP
