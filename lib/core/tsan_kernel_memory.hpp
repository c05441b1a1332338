// SPDX-License-Identifier: MIT
// Tells ThreadSanitizer about memory the kernel maps and unmaps behind its
// back.
//
// liburing maps a ring's submission and completion memory with raw system
// calls, which TSan does not intercept, so TSan never learns that a ring's
// memory went away.  When a later ring (another thread's) gets the same
// addresses, TSan still holds the old ring's writes to those bytes and
// reports the new ring's writes as racing with them.  They cannot race: the
// kernel hands the addresses out again only after the munmap of the old
// ring returned.  These helpers state exactly that ordering and nothing
// more: a release on every page of a mapping just before it is unmapped, an
// acquire on every page of a mapping just after it appeared.  Only accesses
// before an unmap are ordered before accesses after a mapping at the same
// addresses; every other access to the ring stays checked.  They compile to
// nothing without TSan.
//
// TSan's own munmap interceptor does not always forget a mapping's
// accesses either (a small file mapping's imitated write outlived it), so
// libphoenix's own munmaps go through munmap_ordered(): a ring the kernel
// later maps at those addresses is then ordered after them too.
#ifndef PHOENIX_LIB_TSAN_KERNEL_MEMORY_HPP
#define PHOENIX_LIB_TSAN_KERNEL_MEMORY_HPP

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

#if defined(__SANITIZE_THREAD__)
#define PHX_TSAN_ACTIVE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PHX_TSAN_ACTIVE 1
#endif
#endif

#ifdef PHX_TSAN_ACTIVE
#include <sanitizer/tsan_interface.h>
#endif

namespace phx::detail {

#ifdef PHX_TSAN_ACTIVE
namespace tsan {
constexpr std::uintptr_t kPage = 4096;

template <typename Sync>
void each_page(const void *addr, std::size_t size, Sync sync) {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): TSan keys syncs by address
  const auto start = reinterpret_cast<std::uintptr_t>(addr) / kPage * kPage;
  const auto end = reinterpret_cast<std::uintptr_t>(addr) + size;
  for (std::uintptr_t page = start; page < end; page += kPage) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    sync(reinterpret_cast<void *>(page));
  }
}
}  // namespace tsan

/// The kernel just mapped [addr, addr + size) without TSan seeing it.
inline void tsan_kernel_mapped(const void *addr, std::size_t size) {
  tsan::each_page(addr, size, [](void *page) { __tsan_acquire(page); });
}
/// [addr, addr + size) is about to be unmapped without TSan seeing it.
inline void tsan_kernel_unmapping(const void *addr, std::size_t size) {
  tsan::each_page(addr, size, [](void *page) { __tsan_release(page); });
}
#else
inline void tsan_kernel_mapped(const void * /*addr*/, std::size_t /*size*/) {}
inline void tsan_kernel_unmapping(const void * /*addr*/, std::size_t /*size*/) {}
#endif

/// munmap(2), after telling TSan what tsan_kernel_unmapping() tells it.
inline int munmap_ordered(void *addr, std::size_t size) noexcept {
  tsan_kernel_unmapping(addr, size);
  return ::munmap(addr, size);
}

}  // namespace phx::detail

#endif  // PHOENIX_LIB_TSAN_KERNEL_MEMORY_HPP
