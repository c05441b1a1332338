// SPDX-License-Identifier: MIT
// Test-side helpers over the fake CUDA driver (fake_cuda.h): device memory
// and streams made through its entry points, and the switch that makes
// libphoenix load it.  Two fake GPUs whose PCI bus order is the reverse of
// CUDA's ordinals, so phoenix device 0 is CUDA GPU 1.
#ifndef PHOENIX_TESTS_FAKE_GPU_HPP
#define PHOENIX_TESTS_FAKE_GPU_HPP

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fake_cuda.h"
#include "test_support.hpp"

struct CUctx_st;

extern "C" {
// NOLINTBEGIN(readability-identifier-naming): the driver's names
int cuDevicePrimaryCtxRetain(CUctx_st **context, int device);
int cuDevicePrimaryCtxRelease_v2(int device);
int cuCtxPushCurrent_v2(CUctx_st *context);
int cuCtxPopCurrent_v2(CUctx_st **context);
int cuMemAlloc_v2(unsigned long long *pointer, std::size_t size);  // NOLINT(google-runtime-int)
int cuMemFree_v2(unsigned long long pointer);                      // NOLINT(google-runtime-int)
int cuMemcpyHtoD_v2(unsigned long long to, const void *from, std::size_t size);  // NOLINT
int cuMemcpyDtoH_v2(void *to, unsigned long long from, std::size_t size);        // NOLINT
int cuMemcpyDtoHAsync_v2(void *to, unsigned long long from, std::size_t size,    // NOLINT
                         CUstream_st *stream);
int cuMemHostAlloc(void **pointer, std::size_t size, unsigned flags);
int cuMemFreeHost(void *pointer);
int cuStreamCreate(CUstream_st **stream, unsigned flags);
int cuStreamDestroy_v2(CUstream_st *stream);
int cuStreamSynchronize(CUstream_st *stream);
// NOLINTEND(readability-identifier-naming)
}

namespace phx::test {

inline constexpr int kFakeGpus = 2;

/// Points libphoenix at the fake driver; call before anything touches CUDA.
void use_fake_cuda();

/// The CUDA ordinal behind phoenix device @p device_id (bus order reversed).
[[nodiscard]] constexpr int fake_ordinal(int device_id) {
  return kFakeGpus - 1 - device_id;
}

/// The primary context of a CUDA ordinal made current for a scope.
class FakeContext {
 public:
  explicit FakeContext(int ordinal);
  ~FakeContext();
  FakeContext(const FakeContext &) = delete;
  FakeContext &operator=(const FakeContext &) = delete;
  FakeContext(FakeContext &&) = delete;
  FakeContext &operator=(FakeContext &&) = delete;

 private:
  int ordinal_;
};

/// cuMemAlloc'd memory of phoenix device @p device_id.
class FakeDeviceMemory {
 public:
  explicit FakeDeviceMemory(std::size_t size, int device_id = 0);
  ~FakeDeviceMemory();
  FakeDeviceMemory(const FakeDeviceMemory &) = delete;
  FakeDeviceMemory &operator=(const FakeDeviceMemory &) = delete;
  FakeDeviceMemory(FakeDeviceMemory &&) = delete;
  FakeDeviceMemory &operator=(FakeDeviceMemory &&) = delete;

  [[nodiscard]] void *data() const;
  /// The same address as the driver API takes it.
  [[nodiscard]] unsigned long long device_pointer() const { return pointer_; }  // NOLINT
  [[nodiscard]] std::size_t size() const { return size_; }
  void fill(std::byte value) const;
  void upload(const std::vector<std::byte> &bytes, std::size_t offset = 0) const;
  [[nodiscard]] std::vector<std::byte> download() const;
  /// Frees it now (tests of registrations that outlive their memory).
  void release();

 private:
  unsigned long long pointer_ = 0;  // NOLINT(google-runtime-int): the ABI's type
  std::size_t size_;
};

/// A stream of phoenix device 0's GPU.
class FakeStream {
 public:
  explicit FakeStream(int device_id = 0);
  ~FakeStream();
  FakeStream(const FakeStream &) = delete;
  FakeStream &operator=(const FakeStream &) = delete;
  FakeStream(FakeStream &&) = delete;
  FakeStream &operator=(FakeStream &&) = delete;
  [[nodiscard]] CUstream_st *get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream_st *stream_ = nullptr;
};

/// Live handles now.
[[nodiscard]] phx_fake_cuda_counts fake_counts();

/// Tests on the fake driver: libphoenix loads it, and every test leaves no
/// injected failure or slowdown behind.
class FakeGpuTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { use_fake_cuda(); }
  void TearDown() override {
    phx_fake_cuda_clear_failures();
    phx_fake_cuda_set_op_delay_us(0);
  }
  TempDir dir_;
};

}  // namespace phx::test

#endif  // PHOENIX_TESTS_FAKE_GPU_HPP
