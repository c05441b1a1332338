// SPDX-License-Identifier: MIT
// One file for both builds, so every build compiles and lints it.
#include "gpu.hpp"

#include "phoenix/config.h"

#if PHX_WITH_CUDA
#include <cuda_runtime_api.h>

namespace phx::kvcache::gpu {
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

}  // namespace

Memory::Memory(Kind kind, int device, std::size_t bytes)
    : kind_(kind), device_(device), size_(bytes) {
  int count = 0;
  if (const cudaError_t s = cudaGetDeviceCount(&count); s != cudaSuccess || count <= device) {
    throw Unavailable("no CUDA GPU " + std::to_string(device) + " (" +
                      (s != cudaSuccess ? std::string(cudaGetErrorString(s))
                                        : std::to_string(count) + " GPU(s)") +
                      ")");
  }
  check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  if (kind == Kind::device) {
    check(cudaMalloc(&data_, bytes), "cudaMalloc(" + std::to_string(bytes) + ")");
  } else {
    check(cudaHostAlloc(&data_, bytes, cudaHostAllocPortable),
          "cudaHostAlloc(" + std::to_string(bytes) + ")");
  }
}

Memory::~Memory() {
  (void)cudaSetDevice(device_);
  if (kind_ == Kind::device) {
    (void)cudaFree(data_);
  } else {
    (void)cudaFreeHost(data_);
  }
}

void to_device(void *dst, const void *src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(HtoD)");
}

void to_host(void *dst, const void *src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(DtoH)");
}

}  // namespace phx::kvcache::gpu

#else  // !PHX_WITH_CUDA

namespace phx::kvcache::gpu {
namespace {

[[noreturn]] void no_cuda() {
  throw Unavailable("this phx-kvcache was built without CUDA (PHX_WITH_CUDA=OFF)");
}

}  // namespace

Memory::Memory(Kind kind, int device, std::size_t bytes)
    : kind_(kind), device_(device), size_(bytes) {
  no_cuda();
}
Memory::~Memory() = default;
void to_device(void * /*dst*/, const void * /*src*/, std::size_t /*bytes*/) {
  no_cuda();
}
void to_host(void * /*dst*/, const void * /*src*/, std::size_t /*bytes*/) {
  no_cuda();
}

}  // namespace phx::kvcache::gpu

#endif  // PHX_WITH_CUDA
