// SPDX-License-Identifier: MIT
// A buffered descriptor of a file some O_DIRECT descriptor has open: how
// the cache policy reads a range the page cache holds without touching the
// caller's descriptor (O_DIRECT belongs to the open file description, which
// dup() would share and fcntl() would change under the caller's other I/O).
#ifndef PHOENIX_LIB_IO_BUFFERED_TWIN_HPP
#define PHOENIX_LIB_IO_BUFFERED_TWIN_HPP

#include <cstdint>
#include <filesystem>

namespace phx::detail {

/// Opens the file @p fd has open again, read-only and buffered, with
/// POSIX_FADV_RANDOM (the policy reads what the page cache holds: readahead
/// around it would only add disk reads).  Through /proc/self/fd, so a file
/// renamed or unlinked since is still the same file; else by @p path (may
/// be empty) if that is still the same inode.  Returns the descriptor, or
/// -1 when neither works (reads then stay O_DIRECT).
[[nodiscard]] int open_buffered_twin(int fd, const std::filesystem::path &path) noexcept;

/// The descriptor one read of [@p offset, @p offset + @p length) through
/// the caller's @p fd uses under the cache policy: a buffered twin, owned
/// and closed here, when @p fd has O_DIRECT and the page cache holds the
/// range; @p fd itself otherwise.
class PolicyReadFd {
 public:
  PolicyReadFd(int fd, std::uint64_t offset, std::uint64_t length) noexcept;
  ~PolicyReadFd();
  PolicyReadFd(const PolicyReadFd &) = delete;
  PolicyReadFd &operator=(const PolicyReadFd &) = delete;
  PolicyReadFd(PolicyReadFd &&) = delete;
  PolicyReadFd &operator=(PolicyReadFd &&) = delete;

  [[nodiscard]] int fd() const noexcept { return twin_ >= 0 ? twin_ : fd_; }
  /// True when fd() is the buffered twin.
  [[nodiscard]] bool buffered_twin() const noexcept { return twin_ >= 0; }
  /// Hands the twin's ownership to the caller (-1 when there is none).
  [[nodiscard]] int release() noexcept;

 private:
  int fd_;
  int twin_ = -1;
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_IO_BUFFERED_TWIN_HPP
