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

#include "pattern.hpp"
#include "unique_fd.hpp"

namespace phxbench {

void create_pattern_file(const std::string &path, std::uint64_t length) {
  const UniqueFd file(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  const int fd = file.get();
  if (fd < 0) {
    throw std::system_error(errno, std::system_category(), "pattern file: open " + path);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw std::system_error(errno, std::system_category(), "pattern file: stat " + path);
  }
  if (S_ISREG(st.st_mode) && ::ftruncate(fd, static_cast<off_t>(length)) != 0) {
    throw std::system_error(errno, std::system_category(), "pattern file: truncate " + path);
  }
  constexpr std::size_t kChunk = std::size_t{8} << 20;
  std::vector<std::byte> chunk(kChunk);
  for (std::uint64_t offset = 0; offset < length;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, length - offset));
    fill_pattern(std::span(chunk).first(n), offset);
    const ssize_t done = ::pwrite(fd, chunk.data(), n, static_cast<off_t>(offset));
    if (done < 0 && errno == EINTR) {
      continue;
    }
    if (done <= 0) {
      throw std::system_error(
          done < 0 ? errno : EIO, std::system_category(),
          "pattern file: write " + path + " at offset " + std::to_string(offset));
    }
    offset += static_cast<std::uint64_t>(done);
  }
  if (::fsync(fd) != 0) {
    throw std::system_error(errno, std::system_category(), "pattern file: fsync " + path);
  }
}

}  // namespace phxbench
