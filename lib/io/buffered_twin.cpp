// SPDX-License-Identifier: MIT
#include "io/buffered_twin.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "io/residency.hpp"

namespace phx::detail {
namespace {

int open_read_only(const std::string &name) noexcept {
  int fd = -1;
  do {
    // O_NONBLOCK: a path that became a FIFO since must not block the open.
    fd = ::open(name.c_str(),
                O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  } while (fd < 0 && errno == EINTR);
  return fd;
}

}  // namespace

int open_buffered_twin(int fd, const std::filesystem::path &path) noexcept {
  struct stat own = {};
  if (fd < 0 || ::fstat(fd, &own) != 0 || (!S_ISREG(own.st_mode) && !S_ISBLK(own.st_mode))) {
    return -1;
  }
  std::string names[2];
  try {
    names[0] = "/proc/self/fd/" + std::to_string(fd);
    names[1] = path.string();
  } catch (...) {
    return -1;
  }
  for (const std::string &name : names) {
    if (name.empty()) {
      continue;
    }
    const int twin = open_read_only(name);
    if (twin < 0) {
      continue;
    }
    struct stat st = {};
    if (::fstat(twin, &st) == 0 && st.st_dev == own.st_dev && st.st_ino == own.st_ino &&
        st.st_rdev == own.st_rdev) {
      // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
      if (const int flags = ::fcntl(twin, F_GETFL); flags >= 0) {
        (void)::fcntl(twin, F_SETFL,
                      flags & ~O_NONBLOCK);  // NOLINT(cppcoreguidelines-pro-type-vararg)
      }
      (void)::posix_fadvise(twin, 0, 0, POSIX_FADV_RANDOM);
      return twin;
    }
    (void)::close(twin);
  }
  return -1;
}

PolicyReadFd::PolicyReadFd(int fd, std::uint64_t offset, std::uint64_t length) noexcept : fd_(fd) {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_DIRECT) == 0 || (flags & O_ACCMODE) == O_WRONLY || length == 0) {
    return;
  }
  if (read_buffered(fd, offset, length)) {
    twin_ = open_buffered_twin(fd, {});
  }
}

PolicyReadFd::~PolicyReadFd() {
  if (twin_ >= 0) {
    (void)::close(twin_);
  }
}

int PolicyReadFd::release() noexcept {
  return std::exchange(twin_, -1);
}

}  // namespace phx::detail
