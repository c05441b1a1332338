// SPDX-License-Identifier: MIT
// phx-kvcache's names for the shared GPU memory (common/gpu.hpp): device
// and pinned host pools, synchronous copies on the current device.
#ifndef PHX_KVCACHE_GPU_HPP
#define PHX_KVCACHE_GPU_HPP

#include <cstddef>

#include "common/gpu.hpp"
#include "common/unavailable.hpp"

namespace phx::kvcache {

/// The engine cannot run on this machine or build (a JSON "unavailable" record).
using phxtools::Unavailable;

namespace gpu {

using Kind = phxtools::gpu::MemoryKind;

/// cudaMalloc (device) or cudaHostAlloc (pinned) on CUDA device @p device.
class Memory : public phxtools::gpu::DeviceBuffer {
 public:
  Memory(Kind kind, int device, std::size_t bytes) : DeviceBuffer(device, bytes, kind) {}
};

inline void to_device(void *dst, const void *src, std::size_t bytes) {
  phxtools::gpu::copy_to_device(-1, dst, src, bytes);
}
inline void to_host(void *dst, const void *src, std::size_t bytes) {
  phxtools::gpu::copy_to_host(-1, dst, src, bytes);
}

}  // namespace gpu
}  // namespace phx::kvcache

#endif  // PHX_KVCACHE_GPU_HPP
