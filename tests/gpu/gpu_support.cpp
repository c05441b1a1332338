// SPDX-License-Identifier: MIT
#include "gpu_support.hpp"

#include <stdexcept>

#include "cuda/gpu.hpp"

namespace phx::test {

int cuda_gpus(std::string &why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    why = std::string("no CUDA GPU: cudaGetDeviceCount says ") + cudaGetErrorString(err);
    return 0;
  }
  if (n == 0) {
    why = "no CUDA GPU on this machine";
  }
  return n;
}

int cuda_ordinal(int device_id) {
  std::string why;
  auto gpu = detail::cuda::gpu_for_device(device_id, why);
  if (!gpu) {
    throw std::runtime_error(why);
  }
  return gpu->ordinal;
}

DeviceMemory::DeviceMemory(std::size_t size) : size_(size) {
  void *p = nullptr;
  const cudaError_t err = cudaMalloc(&p, size);
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("cudaMalloc: ") + cudaGetErrorString(err));
  }
  data_ = static_cast<std::byte *>(p);
}

DeviceMemory::~DeviceMemory() {
  free_now();
}

void DeviceMemory::free_now() {
  if (data_ != nullptr) {
    (void)cudaFree(data_);
    data_ = nullptr;
  }
}

std::vector<std::byte> DeviceMemory::to_host(std::size_t offset, std::size_t n) const {
  std::vector<std::byte> out(n);
  const cudaError_t err = cudaMemcpy(out.data(), data_ + offset, n, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("cudaMemcpy: ") + cudaGetErrorString(err));
  }
  return out;
}

void DeviceMemory::fill(int value) const {
  if (cudaMemset(data_, value, size_) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    throw std::runtime_error("cudaMemset failed");
  }
}

void DeviceMemory::upload(std::size_t offset, const void *src, std::size_t n) const {
  if (cudaMemcpy(data_ + offset, src, n, cudaMemcpyHostToDevice) != cudaSuccess) {
    throw std::runtime_error("cudaMemcpy to the device failed");
  }
}

void GpuTest::SetUp() {
  std::string why;
  if (cuda_gpus(why) == 0) {
    GTEST_SKIP() << why << ": the GPU suite runs on a GPU machine (scripts/gpu-check)";
  }
  CUDA_OK(cudaSetDevice(cuda_ordinal(0)));
}

}  // namespace phx::test
