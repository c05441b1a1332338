// SPDX-License-Identifier: MIT
// Shared pieces of the GPU suite: a fixture that skips without a GPU,
// device memory, and copies back to the host for byte-for-byte checks.
#ifndef PHOENIX_TESTS_GPU_SUPPORT_HPP
#define PHOENIX_TESTS_GPU_SUPPORT_HPP

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "test_support.hpp"

#define CUDA_OK(call)                                                                          \
  do {                                                                                         \
    const cudaError_t cuda_ok_err_ = (call);                                                   \
    ASSERT_EQ(cuda_ok_err_, cudaSuccess) << #call << ": " << cudaGetErrorString(cuda_ok_err_); \
  } while (0)

namespace phx::test {

/// CUDA GPUs this process sees; 0 with @p why set when none.
[[nodiscard]] int cuda_gpus(std::string &why);

/// The CUDA ordinal of Phoenix device @p device_id (PCI bus order).
[[nodiscard]] int cuda_ordinal(int device_id);

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t size);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory &) = delete;
  DeviceMemory &operator=(const DeviceMemory &) = delete;
  DeviceMemory(DeviceMemory &&) = delete;
  DeviceMemory &operator=(DeviceMemory &&) = delete;
  [[nodiscard]] std::byte *data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  /// The bytes [offset, offset + n) copied to the host.
  [[nodiscard]] std::vector<std::byte> to_host(std::size_t offset, std::size_t n) const;
  void fill(int value) const;
  void upload(std::size_t offset, const void *src, std::size_t n) const;
  /// Frees now (tests of freed memory); the destructor then does nothing.
  void free_now();

 private:
  std::byte *data_ = nullptr;
  std::size_t size_ = 0;
};

/// Skips every test on machines without a GPU, with the reason; selects
/// Phoenix device 0's GPU.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  TempDir dir_;
};

}  // namespace phx::test

#endif  // PHOENIX_TESTS_GPU_SUPPORT_HPP
