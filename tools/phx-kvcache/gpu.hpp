// SPDX-License-Identifier: MIT
// The CUDA runtime calls phx-kvcache needs: device and pinned host memory,
// synchronous copies.  Builds without PHX_WITH_CUDA, or machines without a
// usable GPU, throw Unavailable.
#ifndef PHX_KVCACHE_GPU_HPP
#define PHX_KVCACHE_GPU_HPP

#include <cstddef>
#include <stdexcept>
#include <string>

namespace phx::kvcache {

/// The engine cannot run on this machine or build (a JSON "unavailable" record).
class Unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace gpu {

enum class Kind { device, pinned };

/// cudaMalloc (device) or cudaHostAlloc (pinned) on CUDA device @p device;
/// freed on destruction.
class Memory {
 public:
  Memory(Kind kind, int device, std::size_t bytes);
  ~Memory();
  Memory(const Memory &) = delete;
  Memory &operator=(const Memory &) = delete;
  Memory(Memory &&) = delete;
  Memory &operator=(Memory &&) = delete;
  [[nodiscard]] void *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  Kind kind_;
  int device_;
  void *data_ = nullptr;
  std::size_t size_;
};

/// Synchronous copies on the calling thread's current device.
void to_device(void *dst, const void *src, std::size_t bytes);
void to_host(void *dst, const void *src, std::size_t bytes);

}  // namespace gpu
}  // namespace phx::kvcache

#endif  // PHX_KVCACHE_GPU_HPP
