// SPDX-License-Identifier: MIT
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <utility>

#include "core/device_state.hpp"
#include "core/error.hpp"
#include "io/aligned_io.hpp"
#include "io/buffered_twin.hpp"
#include "io/file_caps.hpp"
#include "io/residency.hpp"
#include "io/stream_io.hpp"
#include "phoenix/phoenix.hpp"

namespace phx {
namespace {

int open_retrying(const std::filesystem::path &path, int flags, mode_t mode) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags, mode);  // NOLINT(cppcoreguidelines-pro-type-vararg)
  } while (fd < 0 && errno == EINTR);
  return fd;
}

std::string open_what(const std::filesystem::path &path) {
  return "open " + path.string();
}

}  // namespace

File::File(std::filesystem::path path, int flags, mode_t mode, DirectIo direct)
    : path_(std::move(path)) {
  if ((flags & O_APPEND) != 0) {
    detail::throw_errno(
        EINVAL, open_what(path_) + ": O_APPEND is not supported (pwrite would ignore offsets)");
  }
  // O_NONBLOCK for the open itself: opening a FIFO blocks until its other
  // end is opened, which would hang the caller on a path it got wrong.
  const bool caller_nonblock = (flags & O_NONBLOCK) != 0;
  flags = (flags & ~O_DIRECT) | O_CLOEXEC | O_NONBLOCK;
  const bool want_direct = direct != DirectIo::off;
  // Unaligned writes under O_DIRECT read-modify-write whole blocks, which
  // needs read access: upgrade write-only opens when permissions allow.
  if (want_direct && (flags & O_ACCMODE) == O_WRONLY) {
    fd_ = open_retrying(path_, (flags & ~O_ACCMODE) | O_RDWR, mode);
    if (fd_ < 0 && errno != EACCES && errno != EPERM && errno != EROFS) {
      const int err = errno;
      detail::throw_errno(err, open_what(path_));
    }
  }
  if (fd_ < 0) {
    fd_ = open_retrying(path_, flags, mode);
    if (fd_ < 0) {
      const int err = errno;
      detail::throw_errno(err, open_what(path_));
    }
  }
  // A folder opens read-only, and every read of it fails later with EISDIR:
  // say so here, where the caller named it.
  if (struct stat st = {}; ::fstat(fd_, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    detail::throw_errno(EISDIR, open_what(path_) + ": a folder, not a file");
  }
  if (struct stat st = {};
      ::fstat(fd_, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
    ::close(fd_);
    fd_ = -1;
    detail::throw_errno(ESPIPE, open_what(path_) +
                                    ": a FIFO or socket has no offsets to read or "
                                    "write at (a regular file or block device)");
  }
  if (!caller_nonblock) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
    if (const int current = ::fcntl(fd_, F_GETFL); current >= 0) {
      // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
      (void)::fcntl(fd_, F_SETFL, current & ~O_NONBLOCK);
    }
  }
  // Set O_DIRECT after open: a filesystem without direct I/O refuses it
  // here (EINVAL) instead of after open(O_CREAT|O_EXCL) already created the
  // file, which would make a buffered retry fail with EEXIST.
  if (want_direct) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
    const int current = ::fcntl(fd_, F_GETFL);
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
    if (current >= 0 && ::fcntl(fd_, F_SETFL, current | O_DIRECT) == 0) {
      direct_ = true;
    } else if (direct == DirectIo::required) {
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      detail::throw_errno(err == EINVAL ? EINVAL : err,
                          open_what(path_) + ": the filesystem does not support O_DIRECT");
    }
  }
  detail::IoPolicy policy;
  if (!detail::policy_for_fd(fd_, policy)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    detail::throw_errno(err, open_what(path_));
  }
  direct_ = policy.direct;
  offset_align_ = policy.offset_align;
  memory_align_ = policy.memory_align;
  if (direct == DirectIo::automatic && direct_ && (flags & O_ACCMODE) != O_WRONLY) {
    buffered_fd_ = detail::open_buffered_twin(fd_, path_);
  }
}

bool File::reads_buffered(std::uint64_t offset, std::uint64_t length) const noexcept {
  if (fd_ < 0) {
    return false;
  }
  if (!direct_) {
    return true;
  }
  return buffered_fd_ >= 0 && length > 0 && detail::read_buffered(buffered_fd_, offset, length);
}

int File::read_fd(const Registration *reg, std::uint64_t offset, std::size_t size) const noexcept {
  if (buffered_fd_ < 0) {
    return fd_;
  }
  // The direct engine's mapped device pages: a buffered read would be a CPU
  // copy from the page cache across the bus, O_DIRECT is the NVMe's DMA.
  if (reg != nullptr) {
    const EngineCapabilities caps = reg->device_->capabilities();
    if (caps.device_memory && caps.host_view) {
      return fd_;
    }
  }
  return detail::read_buffered(buffered_fd_, offset, size) ? buffered_fd_ : fd_;
}

double File::cached_fraction(std::uint64_t offset, std::uint64_t length) const noexcept {
  struct stat st = {};
  if (::fstat(fd_, &st) != 0 || st.st_size <= 0) {
    return 0;
  }
  const auto end = static_cast<std::uint64_t>(st.st_size);
  if (offset >= end) {
    return 0;
  }
  return detail::resident_fraction(fd_, offset, std::min(length, end - offset));
}

File::File(File &&other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      buffered_fd_(std::exchange(other.buffered_fd_, -1)),
      path_(std::move(other.path_)),
      direct_(other.direct_),
      offset_align_(other.offset_align_),
      memory_align_(other.memory_align_) {}

File &File::operator=(File &&other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    if (buffered_fd_ >= 0) {
      ::close(buffered_fd_);
    }
    fd_ = std::exchange(other.fd_, -1);
    buffered_fd_ = std::exchange(other.buffered_fd_, -1);
    path_ = std::move(other.path_);
    direct_ = other.direct_;
    offset_align_ = other.offset_align_;
    memory_align_ = other.memory_align_;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
  if (buffered_fd_ >= 0) {
    ::close(buffered_fd_);
  }
}

std::uint64_t File::size() const {
  struct stat st = {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    detail::throw_errno(err, "stat " + path_.string());
  }
  if (S_ISBLK(st.st_mode)) {
    std::uint64_t bytes = 0;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
    if (::ioctl(fd_, BLKGETSIZE64, &bytes) != 0) {
      const int err = errno;
      detail::throw_errno(err, "BLKGETSIZE64 " + path_.string());
    }
    return bytes;
  }
  return static_cast<std::uint64_t>(st.st_size);
}

std::size_t File::transfer(bool is_write, const Registration *reg, std::size_t reg_offset,
                           std::byte *host, std::size_t size, std::uint64_t file_offset) {
  const char *op = is_write ? "write" : "read";
  if (fd_ < 0) {
    detail::throw_io(EBADF, op, path_, file_offset, size, 0, "file is closed (moved from)");
  }
  constexpr auto kMaxOffset = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
  if (file_offset > kMaxOffset || size > kMaxOffset - file_offset) {
    detail::throw_io(EINVAL, op, path_, file_offset, size, 0, "range exceeds the largest offset");
  }
  if (reg != nullptr) {
    if (!*reg) {
      detail::throw_io(EINVAL, op, path_, file_offset, size, 0, "empty registration");
    }
    if (reg_offset > reg->size() || size > reg->size() - reg_offset) {
      detail::throw_io(EINVAL, op, path_, file_offset, size, 0,
                       "registration offset " + std::to_string(reg_offset) +
                           " + size exceeds the registration's " + std::to_string(reg->size()) +
                           " bytes");
    }
  } else if (host == nullptr && size != 0) {
    detail::throw_io(EFAULT, op, path_, file_offset, size, 0, "null buffer");
  }
  if (size == 0) {
    return 0;
  }
  const int fd = is_write ? fd_ : read_fd(reg, file_offset, size);
  detail::IoPolicy policy;
  if (fd == fd_) {
    policy.direct = direct_;
    policy.offset_align = offset_align_;
    policy.memory_align = memory_align_;
  }
  if (reg != nullptr) {
    policy.chunk_size = reg->device_->options().staging_bytes;
  }
  const auto dir = is_write ? detail::Direction::write : detail::Direction::read;
  const detail::TransferResult result =
      reg != nullptr ? reg->device_->backend().transfer(dir, fd, *reg->mapping_, reg_offset, size,
                                                        file_offset, policy)
                     : detail::transfer(dir, fd, host, size, file_offset, policy);
  if (result.error != 0) {
    detail::throw_io(result.error, op, path_, file_offset, size, result.done,
                     result.detail.empty()
                         ? detail::errno_text(result.error)
                         : result.detail + " (" + detail::errno_text(result.error) + ")");
  }
  return result.done;
}

std::size_t File::read(const Registration &reg, std::size_t reg_offset, std::size_t size,
                       std::uint64_t file_offset) {
  return transfer(false, &reg, reg_offset, nullptr, size, file_offset);
}

std::size_t File::write(const Registration &reg, std::size_t reg_offset, std::size_t size,
                        std::uint64_t file_offset) {
  return transfer(true, &reg, reg_offset, nullptr, size, file_offset);
}

std::size_t File::read(std::span<std::byte> dst, std::uint64_t file_offset) {
  return transfer(false, nullptr, 0, dst.data(), dst.size(), file_offset);
}

std::size_t File::write(std::span<const std::byte> src, std::uint64_t file_offset) {
  // The write path only reads from the buffer.
  return transfer(true, nullptr, 0, const_cast<std::byte *>(src.data()), src.size(), file_offset);
}

void File::submit_async(bool is_write, const Registration &reg, std::size_t reg_offset,
                        std::size_t size, std::uint64_t file_offset, ssize_t *bytes_done,
                        CUstream_st *stream) {
  const char *op = is_write ? "write_async" : "read_async";
  if (fd_ < 0) {
    detail::throw_io(EBADF, op, path_, file_offset, size, 0, "file is closed (moved from)");
  }
  if (!reg) {
    detail::throw_io(EINVAL, op, path_, file_offset, size, 0, "empty registration");
  }
  constexpr auto kMaxOffset = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
  if (reg_offset > reg.size() || size > reg.size() - reg_offset || file_offset > kMaxOffset ||
      size > kMaxOffset - file_offset) {
    detail::throw_io(EINVAL, op, path_, file_offset, size, 0, "range outside the registration");
  }
  detail::StreamRequest request;
  request.dir = is_write ? detail::Direction::write : detail::Direction::read;
  // Chosen at submission: the page cache as it is when the caller asks.
  request.fd = is_write ? fd_ : read_fd(&reg, file_offset, size);
  request.device = reg.device_;
  request.mapping = reg.mapping_;
  request.mapping_offset = reg_offset;
  request.size = size;
  request.file_offset = file_offset;
  if (request.fd == fd_) {
    request.policy.direct = direct_;
    request.policy.offset_align = offset_align_;
    request.policy.memory_align = memory_align_;
  }
  request.bytes_done = bytes_done;
  try {
    detail::submit_stream_ordered(std::move(request), stream);
  } catch (const std::system_error &e) {
    detail::throw_io(e.code().value(), op, path_, file_offset, size, 0, e.what());
  }
}

void File::read_async(const Registration &reg, std::size_t reg_offset, std::size_t size,
                      std::uint64_t file_offset, ssize_t *bytes_done, CUstream_st *stream) {
  submit_async(false, reg, reg_offset, size, file_offset, bytes_done, stream);
}

void File::write_async(const Registration &reg, std::size_t reg_offset, std::size_t size,
                       std::uint64_t file_offset, ssize_t *bytes_done, CUstream_st *stream) {
  submit_async(true, reg, reg_offset, size, file_offset, bytes_done, stream);
}

void File::sync() {
  if (::fsync(fd_) != 0) {
    const int err = errno;
    detail::throw_errno(err, "fsync " + path_.string());
  }
}

void File::truncate(std::uint64_t size) {
  if (size > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ||
      ::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    const int err =
        size > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ? EINVAL : errno;
    detail::throw_errno(err, "truncate " + path_.string() + " to " + std::to_string(size));
  }
}

}  // namespace phx
