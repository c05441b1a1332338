// SPDX-License-Identifier: MIT
// Full-size pread/pwrite with O_DIRECT alignment handled.
//
// A request is cut into an aligned body that goes to the descriptor as it is
// (straight into the target memory: no copy) and unaligned head/tail pieces
// that are staged through a small aligned buffer: read the covering block,
// copy; or read-modify-write the covering block for writes.  Short transfers
// are continued, requests above kMaxSyscallBytes are split, EINTR is retried.
#ifndef PHOENIX_LIB_ALIGNED_IO_HPP
#define PHOENIX_LIB_ALIGNED_IO_HPP

#include <cstddef>
#include <cstdint>
#include <string>

namespace phx::detail {

struct IoPolicy {
  bool direct = false;           ///< descriptor has O_DIRECT
  std::size_t offset_align = 1;  ///< O_DIRECT file offset/length alignment
  std::size_t memory_align = 1;  ///< O_DIRECT memory alignment
  std::size_t max_syscall = 0;   ///< bytes per syscall (0: kMaxSyscallBytes)
  std::size_t chunk_size = 0;    ///< staging buffer bytes (0: Options::defaults())
};

struct TransferResult {
  TransferResult() = default;
  TransferResult(std::size_t bytes, int err) noexcept : done(bytes), error(err) {}
  std::size_t done = 0;  ///< bytes transferred before stopping
  int error = 0;         ///< 0, or the errno that stopped the transfer
  std::string detail;    ///< what stopped it, when errno alone is not enough (CUDA, cuFile)
};

enum class Direction { read, write };

/// Transfers @p size bytes between @p buf and @p fd at @p offset.  Reads stop
/// early only at end of file.  A write whose staged tail extends the file
/// leaves the file exactly offset + size long.  Unaligned writes need the
/// descriptor to be readable (read-modify-write), else EBADF.
[[nodiscard]] TransferResult transfer(Direction dir, int fd, std::byte *buf, std::size_t size,
                                      std::uint64_t offset, const IoPolicy &policy) noexcept;

/// True when @p buf, @p size and @p offset satisfy @p policy as they are.
[[nodiscard]] bool is_aligned(const std::byte *buf, std::size_t size, std::uint64_t offset,
                              const IoPolicy &policy) noexcept;

}  // namespace phx::detail

#endif  // PHOENIX_LIB_ALIGNED_IO_HPP
