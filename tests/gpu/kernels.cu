// SPDX-License-Identifier: MIT
#include "kernels.hpp"

namespace phx::test {
namespace {

__global__ void slow_fill(unsigned char *buf, std::size_t size, std::uint8_t seed,
                          long long spin_cycles) {
  const long long start = clock64();
  while (clock64() - start < spin_cycles) {
  }
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < size; i += stride) {
    buf[i] = static_cast<unsigned char>(seed + i * 7);
  }
}

__global__ void checksum(const unsigned char *buf, std::size_t size, unsigned long long *sum) {
  unsigned long long local = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < size; i += stride) {
    local += static_cast<unsigned long long>(buf[i]) * (i % 251 + 1);
  }
  atomicAdd(sum, local);
}

}  // namespace

void launch_slow_fill(void *buf, std::size_t size, std::uint8_t seed, double milliseconds,
                      cudaStream_t stream) {
  int device = 0;
  int khz = 0;
  (void)cudaGetDevice(&device);
  (void)cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device);
  const auto cycles = static_cast<long long>(milliseconds * (khz > 0 ? khz : 2000000));
  slow_fill<<<264, 256, 0, stream>>>(static_cast<unsigned char *>(buf), size, seed, cycles);
}

std::uint8_t slow_fill_byte(std::uint8_t seed, std::size_t index) {
  return static_cast<std::uint8_t>(seed + index * 7);
}

void launch_checksum(const void *buf, std::size_t size, unsigned long long *sum,
                     cudaStream_t stream) {
  (void)cudaMemsetAsync(sum, 0, sizeof(*sum), stream);
  checksum<<<264, 256, 0, stream>>>(static_cast<const unsigned char *>(buf), size, sum);
}

unsigned long long host_checksum(const void *buf, std::size_t size) {
  const auto *p = static_cast<const unsigned char *>(buf);
  unsigned long long sum = 0;
  for (std::size_t i = 0; i < size; ++i) {
    sum += static_cast<unsigned long long>(p[i]) * (i % 251 + 1);
  }
  return sum;
}

}  // namespace phx::test
