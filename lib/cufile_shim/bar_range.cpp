// SPDX-License-Identifier: MIT
#include "cufile_shim/bar_range.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace phx::cufile_shim {

BarRange classify_bar_range(std::uint64_t bar_size, std::uintptr_t start, std::size_t size,
                            bool mapped) noexcept {
  const std::uint64_t begin = start;
  if (begin >= bar_size) {
    return BarRange::outside;
  }
  if (size > bar_size - begin) {
    return BarRange::past_end;
  }
  return mapped ? BarRange::host_memory : BarRange::inside;
}

bool mapped_in_process(std::uintptr_t start, std::size_t size) noexcept {
  std::FILE *maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) {
    return true;
  }
  const std::uint64_t begin = start;
  const std::uint64_t end = begin + size;  // the caller checked that it does not wrap
  bool mapped = false;
  bool line_start = true;
  char line[512];
  while (!mapped && std::fgets(line, sizeof(line), maps) != nullptr) {
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    // "lo-hi perms offset dev inode path"; the rest of a line longer than
    // the buffer (a long path) comes in further pieces, skipped.
    if (line_start &&
        std::sscanf(line, "%" SCNx64 "-%" SCNx64, &lo, &hi) == 2) {  // NOLINT(cert-err34-c)
      mapped = lo < end && begin < hi;
    }
    line_start = std::strchr(line, '\n') != nullptr;
  }
  std::fclose(maps);
  return mapped;
}

}  // namespace phx::cufile_shim
