// SPDX-License-Identifier: MIT
#include "pattern.hpp"

#include <cstring>

namespace phxtools {
namespace {

// splitmix64's finaliser: neighbouring words get unrelated values.
constexpr std::uint64_t word_at(std::uint64_t word_index, std::uint64_t seed) noexcept {
  std::uint64_t z = word_index * 0x9e3779b97f4a7c15ULL + seed;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Little-endian byte order regardless of the host, so files are portable.
void store_word(std::byte *dst, std::uint64_t word) noexcept {
  for (unsigned i = 0; i < 8; ++i) {
    dst[i] = static_cast<std::byte>(word >> (8 * i));
  }
}

}  // namespace

std::byte pattern_byte(std::uint64_t file_offset, std::uint64_t seed) noexcept {
  return static_cast<std::byte>(word_at(file_offset / 8, seed) >> (8 * (file_offset % 8)));
}

void fill_pattern(std::span<std::byte> dst, std::uint64_t file_offset,
                  std::uint64_t seed) noexcept {
  std::size_t i = 0;
  while (i < dst.size() && (file_offset + i) % 8 != 0) {
    dst[i] = pattern_byte(file_offset + i, seed);
    ++i;
  }
  for (; i + 8 <= dst.size(); i += 8) {
    store_word(dst.data() + i, word_at((file_offset + i) / 8, seed));
  }
  for (; i < dst.size(); ++i) {
    dst[i] = pattern_byte(file_offset + i, seed);
  }
}

std::optional<std::uint64_t> find_mismatch(std::span<const std::byte> data,
                                           std::uint64_t file_offset, std::uint64_t seed) noexcept {
  std::size_t i = 0;
  while (i < data.size() && (file_offset + i) % 8 != 0) {
    if (data[i] != pattern_byte(file_offset + i, seed)) {
      return file_offset + i;
    }
    ++i;
  }
  std::byte expected[8];
  for (; i + 8 <= data.size(); i += 8) {
    store_word(expected, word_at((file_offset + i) / 8, seed));
    if (std::memcmp(expected, data.data() + i, 8) != 0) {
      break;  // the byte loop below names the exact offset
    }
  }
  for (; i < data.size(); ++i) {
    if (data[i] != pattern_byte(file_offset + i, seed)) {
      return file_offset + i;
    }
  }
  return std::nullopt;
}

}  // namespace phxtools
