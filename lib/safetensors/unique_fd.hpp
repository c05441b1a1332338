// SPDX-License-Identifier: MIT
// A file descriptor closed on scope exit, and a pread that does not stop
// short, for the safetensors reader's small plain reads.
#ifndef PHOENIX_LIB_SAFETENSORS_UNIQUE_FD_HPP
#define PHOENIX_LIB_SAFETENSORS_UNIQUE_FD_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace phx::detail {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;
  UniqueFd(UniqueFd &&) = delete;
  UniqueFd &operator=(UniqueFd &&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_;
};

/// Reads exactly @p size bytes at @p offset; throws std::system_error naming
/// @p path (EINVAL when the file ends first).
void read_fully(int fd, void *dst, std::size_t size, std::uint64_t offset,
                const std::filesystem::path &path);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_SAFETENSORS_UNIQUE_FD_HPP
