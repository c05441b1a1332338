// SPDX-License-Identifier: MIT
#include "safetensors/unique_fd.hpp"

#include <unistd.h>

#include <cerrno>
#include <string>

#include "core/error.hpp"

namespace phx::detail {

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) {
    (void)::close(fd_);
  }
}

void read_fully(int fd, void *dst, std::size_t size, std::uint64_t offset,
                const std::filesystem::path &path) {
  auto *out = static_cast<char *>(dst);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      throw_errno(errno, describe_io("read", path, offset, size));
    }
    if (n == 0) {
      throw_errno(EINVAL, describe_io("read", path, offset, size) + ": file ends after " +
                              std::to_string(done) + " bytes");
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace phx::detail
