// SPDX-License-Identifier: MIT
#include "fake_gpu.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace phx::test {
namespace {

void ok(int result, const char *call) {
  if (result != 0) {
    throw std::runtime_error(std::string(call) +
                             " failed in the fake CUDA driver: " + std::to_string(result));
  }
}

}  // namespace

void use_fake_cuda() {
  // Before libphoenix's first driver lookup, which reads these once.
  // NOLINTBEGIN(concurrency-mt-unsafe): tests set them before any thread starts
  ::setenv("PHX_CUDA_DRIVER", PHX_FAKE_CUDA_LIBRARY, 1);
  ::setenv("PHX_FAKE_CUDA_DEVICES", std::to_string(kFakeGpus).c_str(), 1);
  // NOLINTEND(concurrency-mt-unsafe)
}

FakeContext::FakeContext(int ordinal) : ordinal_(ordinal) {
  CUctx_st *context = nullptr;
  ok(cuDevicePrimaryCtxRetain(&context, ordinal), "cuDevicePrimaryCtxRetain");
  ok(cuCtxPushCurrent_v2(context), "cuCtxPushCurrent");
}

FakeContext::~FakeContext() {
  (void)cuCtxPopCurrent_v2(nullptr);
  (void)cuDevicePrimaryCtxRelease_v2(ordinal_);
}

FakeDeviceMemory::FakeDeviceMemory(std::size_t size, int device_id) : size_(size) {
  const FakeContext scope(fake_ordinal(device_id));
  ok(cuMemAlloc_v2(&pointer_, size), "cuMemAlloc");
}

FakeDeviceMemory::~FakeDeviceMemory() {
  release();
}

void FakeDeviceMemory::release() {
  if (pointer_ != 0) {
    (void)cuMemFree_v2(pointer_);
    pointer_ = 0;
  }
}

void *FakeDeviceMemory::data() const {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): a device address
  return reinterpret_cast<void *>(static_cast<std::uintptr_t>(pointer_));
}

void FakeDeviceMemory::fill(std::byte value) const {
  upload(std::vector<std::byte>(size_, value));
}

void FakeDeviceMemory::upload(const std::vector<std::byte> &bytes, std::size_t offset) const {
  ok(cuMemcpyHtoD_v2(pointer_ + offset, bytes.data(), bytes.size()), "cuMemcpyHtoD");
}

std::vector<std::byte> FakeDeviceMemory::download() const {
  std::vector<std::byte> out(size_);
  ok(cuMemcpyDtoH_v2(out.data(), pointer_, size_), "cuMemcpyDtoH");
  return out;
}

FakeStream::FakeStream(int device_id) {
  const FakeContext scope(fake_ordinal(device_id));
  ok(cuStreamCreate(&stream_, 1), "cuStreamCreate");
}

FakeStream::~FakeStream() {
  (void)cuStreamDestroy_v2(stream_);
}

void FakeStream::synchronize() const {
  ok(cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

phx_fake_cuda_counts fake_counts() {
  phx_fake_cuda_counts c{};
  phx_fake_cuda_get_counts(&c);
  return c;
}

}  // namespace phx::test
