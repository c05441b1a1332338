// SPDX-License-Identifier: MIT
// File descriptors for the tools: one owner that closes, an open that
// throws, and pread/pwrite loops that finish the range or throw.
#ifndef PHX_TOOLS_FD_HPP
#define PHX_TOOLS_FD_HPP

#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace phxtools {

/// Owns a descriptor so that every early return closes it.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd &operator=(UniqueFd &&other) noexcept {
    if (this != &other) {
      reset(std::exchange(other.fd_, -1));
    }
    return *this;
  }
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

/// open(2) with O_CLOEXEC added; throws std::system_error "open <path>".
[[nodiscard]] UniqueFd open_fd(const std::string &path, int flags, mode_t mode = 0644);

/// Reads all of @p dst from @p offset, retrying EINTR and short reads;
/// throws std::system_error "read <what> at <offset>" (EIO at end of file).
void pread_all(int fd, std::span<std::byte> dst, std::uint64_t offset, const std::string &what);

/// Writes all of @p src at @p offset, the same way.
void pwrite_all(int fd, std::span<const std::byte> src, std::uint64_t offset,
                const std::string &what);

}  // namespace phxtools

#endif  // PHX_TOOLS_FD_HPP
