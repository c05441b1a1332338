// SPDX-License-Identifier: MIT
#ifndef PHXBENCH_UNIQUE_FD_HPP
#define PHXBENCH_UNIQUE_FD_HPP

#include <unistd.h>

namespace phxbench {

/// Closes a descriptor on destruction.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;
  UniqueFd(UniqueFd &&) = delete;
  UniqueFd &operator=(UniqueFd &&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace phxbench

#endif  // PHXBENCH_UNIQUE_FD_HPP
