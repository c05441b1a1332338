// SPDX-License-Identifier: MIT
// The few CUDA runtime calls the tools need (gpu.cpp).  In builds without
// PHX_WITH_CUDA no GPU is usable.  Failures throw Unavailable (no GPU) or
// std::runtime_error.
#ifndef PHX_TOOLS_GPU_HPP
#define PHX_TOOLS_GPU_HPP

#include <cstddef>
#include <string>

struct CUstream_st;

namespace phxtools::gpu {

struct Probe {
  bool usable = false;
  std::string name;    ///< the GPU's name when usable
  std::string reason;  ///< why not, when not usable
};

// Every `device` below is a Phoenix device id (the tools' --device), the
// GPU behind it found with phx::cuda_ordinal: Phoenix ids follow PCI bus
// order and CUDA's ordinals need not.

/// Whether device @p device has a usable CUDA GPU.  Never throws.
[[nodiscard]] Probe probe(int device) noexcept;

enum class MemoryKind { device, pinned };

/// Device memory (cudaMalloc) or pinned host memory (cudaHostAlloc) of one
/// GPU, freed on destruction.  Throws Unavailable without a usable GPU.
class DeviceBuffer {
 public:
  DeviceBuffer(int device, std::size_t bytes, MemoryKind kind = MemoryKind::device);
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  DeviceBuffer(DeviceBuffer &&) = delete;
  DeviceBuffer &operator=(DeviceBuffer &&) = delete;
  ~DeviceBuffer();
  [[nodiscard]] void *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  int device_;
  MemoryKind kind_;
  void *data_ = nullptr;
  std::size_t size_;
};

/// Synchronous copies; the calling thread's current device is set to @p device
/// (a negative @p device leaves it as it is).
void copy_to_device(int device, void *dst, const void *src, std::size_t bytes);
void copy_to_host(int device, void *dst, const void *src, std::size_t bytes);

/// A CUDA stream on one device.
class Stream {
 public:
  explicit Stream(int device);
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  Stream(Stream &&) = delete;
  Stream &operator=(Stream &&) = delete;
  ~Stream();
  [[nodiscard]] CUstream_st *get() const noexcept { return stream_; }
  void synchronize();

 private:
  int device_;
  CUstream_st *stream_ = nullptr;
};

}  // namespace phxtools::gpu

#endif  // PHX_TOOLS_GPU_HPP
