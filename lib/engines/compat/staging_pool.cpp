// SPDX-License-Identifier: MIT
#include "engines/compat/staging_pool.hpp"

#include <cerrno>
#include <utility>

#include "core/error.hpp"
#include "cuda/driver_api.hpp"

namespace phx::detail {

PinnedBuffer::PinnedBuffer(std::size_t size) {
  const cuda::Driver *d = cuda::driver();
  if (d == nullptr) {
    throw_errno(ENODEV, cuda::unavailable_reason());
  }
  // cuMemHostAlloc needs a current context; the host engine's loads have none.
  const cuda::ScopedContext scope(cuda::any_context());
  void *p = nullptr;
  cuda::check(d->MemHostAlloc(&p, size, cuda::kMemHostAllocPortable), "cuMemHostAlloc");
  data_ = static_cast<std::byte *>(p);
  size_ = size;
}

namespace {

void free_pinned(std::byte *data) noexcept {
  if (data == nullptr) {
    return;
  }
  try {
    const cuda::ScopedContext scope(cuda::any_context());
    (void)cuda::driver()->MemFreeHost(data);
  } catch (...) {
    // No context can be made current: the memory goes with the process.
  }
}

}  // namespace

PinnedBuffer::~PinnedBuffer() {
  free_pinned(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer &PinnedBuffer::operator=(PinnedBuffer &&other) noexcept {
  if (this != &other) {
    free_pinned(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace phx::detail
