// SPDX-License-Identifier: MIT
#include "engines/compat/staging_pool.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
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

constexpr std::size_t kHuge = PinnedBuffer::kHugeStaging;

/// @p length bytes (a multiple of kHuge) of anonymous memory at a
/// huge-page boundary, or null.
std::byte *map_huge_aligned(std::size_t length) noexcept {
  void *p =
      mmap(nullptr, length + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return nullptr;
  }
  auto *base = static_cast<std::byte *>(p);
  const std::size_t head = (kHuge - reinterpret_cast<std::uintptr_t>(p) % kHuge) % kHuge;
  std::byte *aligned = base + head;
  // Unmapping the slack either side cannot fail on ranges mmap just gave.
  if (head > 0) {
    (void)munmap(base, head);
  }
  if (const std::size_t tail = kHuge - head; tail > 0) {
    (void)munmap(aligned + length, tail);
  }
  return aligned;
}

/// Faults every page of [data, data + length) in, writable; false when
/// the memory is not there (ENOMEM: no OOM kill for staging).
bool populate(std::byte *data, std::size_t length) noexcept {
  // One call where the kernel has it (5.14, EINVAL before); else a write
  // to each page.
  if (madvise(data, length, MADV_POPULATE_WRITE) == 0) {
    return true;
  }
  if (errno != EINVAL) {
    return false;
  }
  for (std::size_t at = 0; at < length; at += 4096) {
    *static_cast<volatile std::byte *>(data + at) = std::byte{0};
  }
  return true;
}

}  // namespace

PinnedBuffer PinnedBuffer::staging(std::size_t size) {
  const cuda::Driver *d = cuda::driver();
  if (d == nullptr) {
    throw_errno(ENODEV, cuda::unavailable_reason());
  }
  if (size < kHuge) {
    return PinnedBuffer(size);
  }
  // cuMemHostAlloc faults its pages in and zeroes them inside the driver,
  // and the driver holds every other thread's copies back meanwhile (host-
  // to-device copies ran at 1.0 GB/s against 52 GB/s alone on an H200
  // while another thread pinned).  Here the kernel does that work before
  // the driver is called, on 2 MiB pages where THP is enabled ("madvise"
  // or "always"), and the driver only pins what is already there.
  const std::size_t length = (size + kHuge - 1) / kHuge * kHuge;
  std::byte *data = map_huge_aligned(length);
  if (data != nullptr) {
    (void)madvise(data, length, MADV_HUGEPAGE);  // EINVAL without THP: small pages then
    (void)madvise(data, length, MADV_DONTFORK);  // no copy of pinned pages at each fork()
    const cuda::ScopedContext scope(cuda::any_context());
    if (populate(data, length) &&
        d->MemHostRegister(data, length, cuda::kMemHostRegisterPortable) == cuda::kSuccess) {
      PinnedBuffer buffer;
      buffer.data_ = data;
      buffer.size_ = size;
      buffer.mapped_ = length;
      return buffer;
    }
    (void)munmap(data, length);
  }
  // The driver would not register it (or no mapping): its own allocation,
  // whose error, if it fails too, is the one to report.
  return PinnedBuffer(size);
}

void PinnedBuffer::release() noexcept {
  if (data_ == nullptr) {
    return;
  }
  try {
    const cuda::ScopedContext scope(cuda::any_context());
    if (mapped_ != 0) {
      (void)cuda::driver()->MemHostUnregister(data_);
    } else {
      (void)cuda::driver()->MemFreeHost(data_);
    }
  } catch (...) {
    // No context can be made current: the memory goes with the process.
    return;
  }
  if (mapped_ != 0) {
    (void)munmap(data_, mapped_);
  }
}

PinnedBuffer::~PinnedBuffer() {
  release();
}

PinnedBuffer::PinnedBuffer(PinnedBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

PinnedBuffer &PinnedBuffer::operator=(PinnedBuffer &&other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

}  // namespace phx::detail
