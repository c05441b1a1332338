// SPDX-License-Identifier: MIT
#include "fd.hpp"

#include <fcntl.h>

#include <cerrno>
#include <system_error>

namespace phxtools {

UniqueFd open_fd(const std::string &path, int flags, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC, mode));  // NOLINT(*-vararg)
  if (!fd) {
    throw std::system_error(errno, std::system_category(), "open " + path);
  }
  return fd;
}

void pread_all(int fd, std::span<std::byte> dst, std::uint64_t offset, const std::string &what) {
  for (std::size_t done = 0; done < dst.size();) {
    const ssize_t n =
        ::pread(fd, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw std::system_error(n < 0 ? errno : EIO, std::system_category(),
                              "read " + what + " at " + std::to_string(offset + done));
    }
    done += static_cast<std::size_t>(n);
  }
}

void pwrite_all(int fd, std::span<const std::byte> src, std::uint64_t offset,
                const std::string &what) {
  for (std::size_t done = 0; done < src.size();) {
    const ssize_t n =
        ::pwrite(fd, src.data() + done, src.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw std::system_error(n < 0 ? errno : EIO, std::system_category(),
                              "write " + what + " at " + std::to_string(offset + done));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace phxtools
