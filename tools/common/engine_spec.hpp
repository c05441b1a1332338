// SPDX-License-Identifier: MIT
// The libphoenix engines the tools drive: their names, the memory each
// registers, opening a device with one, and whether one can run here.
#ifndef PHX_TOOLS_ENGINE_SPEC_HPP
#define PHX_TOOLS_ENGINE_SPEC_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "gpu.hpp"
#include "host_buffer.hpp"
#include "phoenix/phoenix.hpp"
#include "unavailable.hpp"

namespace phxtools {

struct EngineSpec {
  const char *name;    ///< phx::to_string(engine)
  phx::Engine engine;  ///< libphoenix's engine
  bool gpu_memory;     ///< registers GPU memory (else host memory)
};

/// direct, compat, cufile and host, in that order.
[[nodiscard]] std::span<const EngineSpec> libphoenix_engines() noexcept;
/// The engine @p name names, old spellings included (engine_names.hpp).
[[nodiscard]] const EngineSpec *find_libphoenix_engine(std::string_view name);

/// phx::Device::open(@p device, @p engine), throwing Unavailable (naming
/// the engine) where the module, the engine or the GPU is missing here
/// (ENODEV, ENOTSUP, EPROTO), any other error as it is.
[[nodiscard]] phx::Device open_device(int device, phx::Engine engine);

/// Memory of the kind an engine registers: GPU memory from cudaMalloc,
/// page-aligned host memory, or, with @p device_addr, device addresses
/// starting there that something else owns (the rig's PCI BAR provider,
/// whose device addresses are BAR byte offsets).
class Memory {
 public:
  Memory(const EngineSpec &spec, int device, std::size_t bytes,
         std::optional<std::uint64_t> device_addr = std::nullopt);
  [[nodiscard]] void *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// "gpu", "host" or "device-addr".
  [[nodiscard]] const char *kind() const noexcept;

  /// Copies [offset, +out.size()) of the memory to @p out.  Device
  /// addresses are reached through @p reg's host view, so they need a live
  /// registration covering the range; GPU and host memory ignore @p reg.
  void copy_out(const phx::Registration *reg, std::size_t offset, std::span<std::byte> out) const;

 private:
  int device_;
  std::size_t size_;
  std::unique_ptr<gpu::DeviceBuffer> gpu_;
  std::unique_ptr<HostBuffer> host_;
  void *data_ = nullptr;
};

/// Why @p spec cannot run here (the device does not open, or GPU memory is
/// needed and no GPU is usable), or nothing.  @p needs_gpu false skips the
/// GPU check (memory given by --device-addr).
[[nodiscard]] std::optional<std::string> unavailable_reason(const EngineSpec &spec, int device,
                                                            bool needs_gpu = true);

}  // namespace phxtools

#endif  // PHX_TOOLS_ENGINE_SPEC_HPP
