// SPDX-License-Identifier: MIT
// The CUDA runtime calls, in builds with PHX_WITH_CUDA (statically linked
// cudart: it loads the driver only when called, so the tools start on
// machines without one); without CUDA every GPU is unusable.  One file
// either way, so every build compiles and lints it.
#include "gpu.hpp"

#include "phoenix/config.h"
#include "phoenix/phoenix.hpp"
#include "unavailable.hpp"

#if PHX_WITH_CUDA
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace phxtools::gpu {
namespace {

void check(cudaError_t status, const std::string &what) {
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver ||
      status == cudaErrorInvalidDevice) {
    throw Unavailable(what + ": " + cudaGetErrorString(status));
  }
  if (status != cudaSuccess) {
    throw std::runtime_error(what + ": " + cudaGetErrorName(status) + " (" +
                             cudaGetErrorString(status) + ")");
  }
}

// CUDA's ordinal of Phoenix device @p device (PCI order; CUDA's own order
// may differ); throws Unavailable where there is none.
int ordinal_of(int device) {
  const int ordinal = phx::cuda_ordinal(device);
  if (ordinal < 0) {
    throw Unavailable("no CUDA GPU for device " + std::to_string(device));
  }
  return ordinal;
}

// A negative device: the calling thread's current one.
int resolve(int device) {
  if (device >= 0) {
    return ordinal_of(device);
  }
  int current = 0;
  check(cudaGetDevice(&current), "cudaGetDevice");
  return current;
}

void use(int device) {
  const int ordinal = resolve(device);
  check(cudaSetDevice(ordinal),
        "cudaSetDevice(" + std::to_string(ordinal) + ") for device " + std::to_string(device));
}

}  // namespace

Probe probe(int device) noexcept {
  Probe result;
  try {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      result.reason = std::string("no usable CUDA GPU (cudaGetDeviceCount: ") +
                      cudaGetErrorString(status) + ")";
      return result;
    }
    const int ordinal = device < 0 ? -1 : phx::cuda_ordinal(device);
    if (ordinal < 0 || ordinal >= count) {
      result.reason = "device " + std::to_string(device) + " has no CUDA GPU (" +
                      std::to_string(count) + " GPU(s))";
      return result;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
      result.reason = "cudaGetDeviceProperties failed for CUDA GPU " + std::to_string(ordinal);
      return result;
    }
    result.usable = true;
    result.name = prop.name;
  } catch (...) {
    result.reason = "CUDA probe failed";
  }
  return result;
}

DeviceBuffer::DeviceBuffer(int device, std::size_t bytes, MemoryKind kind)
    : device_(resolve(device)), kind_(kind), size_(bytes) {
  check(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
  if (kind == MemoryKind::device) {
    check(cudaMalloc(&data_, bytes), "cudaMalloc(" + std::to_string(bytes) + ")");
  } else {
    check(cudaHostAlloc(&data_, bytes, cudaHostAllocPortable),
          "cudaHostAlloc(" + std::to_string(bytes) + ")");
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) {
    (void)cudaSetDevice(device_);
    if (kind_ == MemoryKind::device) {
      (void)cudaFree(data_);
    } else {
      (void)cudaFreeHost(data_);
    }
  }
}

void copy_to_device(int device, void *dst, const void *src, std::size_t bytes) {
  use(device);
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
}

void copy_to_host(int device, void *dst, const void *src, std::size_t bytes) {
  use(device);
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device to host");
}

Stream::Stream(int device) : device_(resolve(device)) {
  check(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = stream;
}

Stream::~Stream() {
  if (stream_ != nullptr) {
    (void)cudaSetDevice(device_);
    (void)cudaStreamDestroy(stream_);
  }
}

void Stream::synchronize() {
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace phxtools::gpu

#else  // !PHX_WITH_CUDA

namespace phxtools::gpu {
namespace {

[[noreturn]] void no_cuda() {
  throw Unavailable("built without CUDA (PHX_WITH_CUDA=OFF)");
}

}  // namespace

Probe probe(int /*device*/) noexcept {
  return {false, "", "built without CUDA (PHX_WITH_CUDA=OFF)"};
}

DeviceBuffer::DeviceBuffer(int device, std::size_t bytes, MemoryKind kind)
    : device_(device), kind_(kind), size_(bytes) {
  no_cuda();
}
// NOLINTNEXTLINE(performance-trivially-destructible): the CUDA build frees here
DeviceBuffer::~DeviceBuffer() = default;
void copy_to_device(int /*device*/, void * /*dst*/, const void * /*src*/, std::size_t /*bytes*/) {
  no_cuda();
}
void copy_to_host(int /*device*/, void * /*dst*/, const void * /*src*/, std::size_t /*bytes*/) {
  no_cuda();
}
Stream::Stream(int device) : device_(device) {
  no_cuda();
}
// NOLINTNEXTLINE(performance-trivially-destructible): the CUDA build destroys here
Stream::~Stream() = default;
void Stream::synchronize() {
  no_cuda();
}

}  // namespace phxtools::gpu

#endif  // PHX_WITH_CUDA
