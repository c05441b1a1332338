// SPDX-License-Identifier: MIT
#include "io/residency.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/tsan_kernel_memory.hpp"

namespace phx::detail {
namespace {

// Ranges up to this many pages are counted page by page.  Past it, mincore
// on every page costs a page-cache lookup each: 4 Mi lookups for a 16 GB
// checkpoint took ~0.1 s on the H200 before the first byte moved, a fifth
// of a warm load.  One page per cell of a stratified sample is enough for
// a decision taken at one half.
constexpr std::uint64_t kExactPages = 16384;
constexpr std::uint64_t kSampleCells = 1024;
// Pages mapped at once: bounds the mapping and, for exact counts, the vector.
constexpr std::uint64_t kWindowPages = 65536;

// Where in its cell a sample falls: fixed per cell, but not at a fixed
// stride, so that a periodic layout of cached and evicted runs (every
// other megabyte, say) cannot alias with the samples.
std::uint64_t sample_in_cell(std::uint64_t cell, std::uint64_t cell_pages) noexcept {
  std::uint64_t x = cell + 0x9e3779b97f4a7c15ULL;  // splitmix64
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  x ^= x >> 31U;
  return x % cell_pages;
}

// cachestat(2) (Linux 6.5): the page cache's count for a byte range in one
// call, with no mapping to set up and tear down: a few microseconds less
// per read, which File's per-read policy pays at every request.  The ABI,
// from include/uapi/linux/mman.h.
constexpr long kCachestatSyscall = 451;  // the same number on every architecture
struct CachestatRange {
  std::uint64_t off;
  std::uint64_t len;
};
struct Cachestat {
  std::uint64_t nr_cache;
  std::uint64_t nr_dirty;
  std::uint64_t nr_writeback;
  std::uint64_t nr_evicted;
  std::uint64_t nr_recently_evicted;
};
std::atomic<bool> cachestat_missing{false};

// -1 when cachestat cannot tell (an older kernel, or a file it refuses).
double cached_by_cachestat(int fd, std::uint64_t begin, std::uint64_t pages,
                           std::uint64_t page) noexcept {
  if (cachestat_missing.load(std::memory_order_relaxed)) {
    return -1;
  }
  CachestatRange range{begin, pages * page};
  Cachestat stat{};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
  if (::syscall(kCachestatSyscall, fd, &range, &stat, 0) != 0) {
    if (errno == ENOSYS) {
      cachestat_missing.store(true, std::memory_order_relaxed);
    }
    return -1;
  }
  return static_cast<double>(std::min(stat.nr_cache, pages)) / static_cast<double>(pages);
}

// The whole pages [offset, offset + length) touches; none when the page
// size cannot be told.
struct PageSpan {
  std::uint64_t page = 0;
  std::uint64_t begin = 0;
  std::uint64_t pages = 0;
};

PageSpan page_span(std::uint64_t offset, std::uint64_t length) noexcept {
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (length == 0 || page_size <= 0) {
    return {};
  }
  PageSpan span;
  span.page = static_cast<std::uint64_t>(page_size);
  span.begin = offset / span.page * span.page;
  span.pages = (offset + length - span.begin + span.page - 1) / span.page;
  return span;
}

}  // namespace

double resident_fraction(int fd, std::uint64_t offset, std::uint64_t length) noexcept {
  const PageSpan span = page_span(offset, length);
  if (span.pages == 0) {
    return 0;
  }
  // Exact ranges only: past kExactPages cachestat walks every page of the
  // range, where mincore's sample looks at 1024.
  if (span.pages <= kExactPages) {
    if (const double cached = cached_by_cachestat(fd, span.begin, span.pages, span.page);
        cached >= 0) {
      return cached;
    }
  }
  return mincore_fraction(fd, offset, length);
}

double mincore_fraction(int fd, std::uint64_t offset, std::uint64_t length) noexcept {
  const auto [page, begin, pages] = page_span(offset, length);
  if (pages == 0) {
    return 0;
  }
  const std::uint64_t cell = pages <= kExactPages ? 1 : (pages + kSampleCells - 1) / kSampleCells;
  // Whole cells per window, so that no cell straddles two mappings.
  const std::uint64_t window = std::max(cell, kWindowPages / cell * cell);
  std::uint64_t resident = 0;
  std::uint64_t looked = 0;
  try {
    std::vector<unsigned char> flags(cell == 1 ? window : 1);
    for (std::uint64_t first = 0; first < pages; first += window) {
      const std::uint64_t span = std::min(window, pages - first);
      auto *map =
          static_cast<unsigned char *>(::mmap(nullptr, span * page, PROT_READ, MAP_SHARED, fd,
                                              static_cast<off_t>(begin + first * page)));
      if (map == MAP_FAILED) {
        return 0;
      }
      int rc = 0;
      if (cell == 1) {
        rc = ::mincore(map, span * page, flags.data());
        looked += span;
        resident += static_cast<std::uint64_t>(
            std::count_if(flags.begin(), flags.begin() + static_cast<std::ptrdiff_t>(span),
                          [](unsigned char f) { return (f & 1U) != 0; }));
      } else {
        for (std::uint64_t at = 0; at < span && rc == 0; at += cell) {
          const std::uint64_t c = (first + at) / cell;
          const std::uint64_t p = at + sample_in_cell(c, std::min(cell, span - at));
          rc = ::mincore(map + p * page, page, flags.data());
          ++looked;
          resident += flags[0] & 1U;
        }
      }
      (void)munmap_ordered(map, span * page);
      if (rc != 0) {
        return 0;
      }
    }
  } catch (...) {
    return 0;
  }
  return looked == 0 ? 0 : static_cast<double>(resident) / static_cast<double>(looked);
}

}  // namespace phx::detail
