// SPDX-License-Identifier: MIT
#include "safetensors/residency.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "tsan_kernel_memory.hpp"

namespace phx::detail {

double resident_fraction(int fd, std::uint64_t offset, std::uint64_t length) noexcept {
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (length == 0 || page_size <= 0) {
    return 0;
  }
  const auto page = static_cast<std::uint64_t>(page_size);
  const std::uint64_t begin = offset / page * page;
  const std::uint64_t end = offset + length;
  // A window at a time keeps the mapping and the vector small for huge files.
  constexpr std::uint64_t kWindowPages = 65536;
  std::uint64_t resident = 0;
  std::uint64_t pages = 0;
  try {
    std::vector<unsigned char> flags(kWindowPages);
    for (std::uint64_t at = begin; at < end; at += kWindowPages * page) {
      const std::uint64_t span = std::min(kWindowPages * page, end - at);
      void *map = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(at));
      if (map == MAP_FAILED) {
        return 0;
      }
      const int rc = ::mincore(map, span, flags.data());
      (void)munmap_ordered(map, span);
      if (rc != 0) {
        return 0;
      }
      const std::uint64_t n = (span + page - 1) / page;
      pages += n;
      resident += static_cast<std::uint64_t>(
          std::count_if(flags.begin(), flags.begin() + static_cast<std::ptrdiff_t>(n),
                        [](unsigned char f) { return (f & 1U) != 0; }));
    }
  } catch (...) {
    return 0;
  }
  return pages == 0 ? 0 : static_cast<double>(resident) / static_cast<double>(pages);
}

}  // namespace phx::detail
