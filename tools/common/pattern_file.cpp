// SPDX-License-Identifier: MIT
#include "pattern_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <span>
#include <system_error>
#include <vector>

#include "fd.hpp"
#include "pattern.hpp"

namespace phxtools {

void create_pattern_file(const std::string &path, std::uint64_t length) {
  const UniqueFd file = open_fd(path, O_RDWR | O_CREAT);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) {
    throw std::system_error(errno, std::system_category(), "pattern file: stat " + path);
  }
  if (S_ISREG(st.st_mode) && ::ftruncate(file.get(), static_cast<off_t>(length)) != 0) {
    throw std::system_error(errno, std::system_category(), "pattern file: truncate " + path);
  }
  constexpr std::size_t kChunk = std::size_t{8} << 20;
  std::vector<std::byte> chunk(kChunk);
  for (std::uint64_t offset = 0; offset < length; offset += kChunk) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, length - offset));
    fill_pattern(std::span(chunk).first(n), offset);
    pwrite_all(file.get(), std::span(chunk).first(n), offset, "pattern file " + path);
  }
  if (::fsync(file.get()) != 0) {
    throw std::system_error(errno, std::system_category(), "pattern file: fsync " + path);
  }
}

}  // namespace phxtools
