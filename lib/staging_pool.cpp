// SPDX-License-Identifier: MIT
#include "staging_pool.hpp"

#include <cerrno>
#include <utility>

#include "cuda/driver_api.hpp"
#include "error.hpp"

namespace phx::detail {

PinnedBuffer::PinnedBuffer(std::size_t size) {
  const cuda::Driver *d = cuda::driver();
  if (d == nullptr) {
    throw_errno(ENODEV, cuda::unavailable_reason());
  }
  void *p = nullptr;
  cuda::check(d->MemHostAlloc(&p, size, cuda::kMemHostAllocPortable), "cuMemHostAlloc");
  data_ = static_cast<std::byte *>(p);
  size_ = size;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) {
    (void)cuda::driver()->MemFreeHost(data_);
  }
}

PinnedBuffer::PinnedBuffer(PinnedBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer &PinnedBuffer::operator=(PinnedBuffer &&other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) {
      (void)cuda::driver()->MemFreeHost(data_);
    }
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace phx::detail
