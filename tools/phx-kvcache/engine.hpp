// SPDX-License-Identifier: MIT
// How a replay moves blocks into the pool: one implementation per engine
// (direct, compat, host and the pinned-host ceiling through phx::Gather;
// posix as a per-block pread + copy loop; cufile as per-block cuFile reads).
#ifndef PHX_KVCACHE_ENGINE_HPP
#define PHX_KVCACHE_ENGINE_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace phx::kvcache {

struct EngineSetup {
  std::filesystem::path file;
  std::size_t block_size = 0;
  std::size_t pool_blocks = 0;
  int device = 0;                                ///< Phoenix / CUDA device id
  std::optional<std::uintptr_t> device_address;  ///< use this pool instead of allocating
  bool direct_io = true;                         ///< O_DIRECT
  unsigned queue_depth = 0;                      ///< 0: the library's default
  std::size_t max_request = 0;                   ///< 0: the library's default
  bool merge = true;
};

class Engine {
 public:
  Engine() = default;
  virtual ~Engine() = default;
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;
  Engine(Engine &&) = delete;
  Engine &operator=(Engine &&) = delete;

  /// Moves file block blocks[i] into pool slot slots[i], all of them before
  /// returning; returns the I/O requests it took.  Throws
  /// std::runtime_error naming the first block that failed.
  virtual std::size_t load(std::span<const std::uint64_t> blocks,
                           std::span<const std::uint64_t> slots) = 0;
  /// Copies pool slot slots[i] to out[i * block_size] (out holds
  /// slots.size() blocks), for --verify.
  virtual void fetch(std::span<const std::uint64_t> slots, std::span<std::byte> out) = 0;
  /// Settings worth recording (memory kind, queue depth, ...).
  [[nodiscard]] virtual nlohmann::json describe() const = 0;
};

/// "direct", "compat", "host", "pinned", "posix", "cufile" (old spellings
/// "phoenix" and "gds" accepted).  Throws
/// Unavailable when the engine cannot run here, std::invalid_argument for
/// an unknown name, std::runtime_error / std::system_error otherwise.
/// The engines by their canonical names, in the order --help lists them.
[[nodiscard]] const std::vector<std::string> &engine_names();

[[nodiscard]] std::unique_ptr<Engine> make_engine(const std::string &given,
                                                  const EngineSetup &setup);

[[nodiscard]] std::unique_ptr<Engine> make_gather_engine(const std::string &name,
                                                         const EngineSetup &setup);
[[nodiscard]] std::unique_ptr<Engine> make_posix_engine(const EngineSetup &setup);
[[nodiscard]] std::unique_ptr<Engine> make_cufile_engine(const EngineSetup &setup);

}  // namespace phx::kvcache

#endif  // PHX_KVCACHE_ENGINE_HPP
