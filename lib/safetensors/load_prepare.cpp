// SPDX-License-Identifier: MIT
// The loader's prepare stage: each segment's destination allocated and
// registered (load_stages.hpp).
#include <cerrno>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "safetensors/load_stages.hpp"

namespace phx::safetensors::stage {

MemoryKind memory_of(const EngineCapabilities &caps) noexcept {
  return caps.device_memory ? MemoryKind::cuda : MemoryKind::host;
}

std::vector<Target> prepare_targets(const Checkpoint &ckpt, const LoadPlan &plan,
                                    const LoadOptions &options, const DeviceOf &device) {
  std::vector<Target> targets(plan.segments.size());
  for (std::size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment &s = plan.segments[i];
    Device &dev = device(s.device);
    Target &t = targets[i];
    t.segment = &s;
    t.memory = memory_of(dev.capabilities());
    if (options.allocate) {
      t.base = static_cast<std::byte *>(options.allocate(s));
      if (t.base == nullptr) {
        phx::detail::throw_errno(ENOMEM, ckpt.files[s.file].path.string() +
                                             ": the caller's allocator returned no memory for " +
                                             std::to_string(s.bytes()) + " bytes");
      }
    } else {
      t.owner = t.memory == MemoryKind::host
                    ? (options.pinned_host ? allocate_pinned(s.bytes())
                                           : allocate_host(s.bytes(), options.alignment))
                    : allocate_cuda(s.device, s.bytes());
      t.base = t.owner->data();
    }
    t.ordinal = t.memory == MemoryKind::cuda ? cuda_ordinal(s.device) : -1;
    t.registration = dev.register_memory(t.base, s.bytes());
  }
  return targets;
}

}  // namespace phx::safetensors::stage
