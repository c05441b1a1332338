// SPDX-License-Identifier: MIT
// A build without CUDA: no GPU is ever usable.
#include "engine.hpp"
#include "gpu.hpp"

namespace phxbench::gpu {
namespace {

[[noreturn]] void no_cuda() {
  throw Unavailable("this phxbench was built without CUDA");
}

}  // namespace

Probe probe(int /*device*/) noexcept {
  return {false, "", "this phxbench was built without CUDA"};
}

DeviceBuffer::DeviceBuffer(int device, std::size_t bytes) : device_(device), size_(bytes) {
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

}  // namespace phxbench::gpu
