// SPDX-License-Identifier: MIT
#include "io/aligned_io.hpp"

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>

#include "core/config.hpp"
#include "core/log.hpp"
#include "phoenix/phoenix.hpp"

namespace phx::detail {
namespace {

// Each thread keeps one staging buffer, grown on demand and bounded by the
// chunk size (or one block when a block is larger), so a pool of I/O threads
// costs threads x chunk of memory and no allocation per request.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  ~StagingBuffer() { std::free(data_); }  // NOLINT(cppcoreguidelines-no-malloc)
  StagingBuffer(const StagingBuffer &) = delete;
  StagingBuffer &operator=(const StagingBuffer &) = delete;
  StagingBuffer(StagingBuffer &&) = delete;
  StagingBuffer &operator=(StagingBuffer &&) = delete;

  std::byte *get(std::size_t size, std::size_t align) noexcept {
    align = std::max<std::size_t>(align, 4096);
    size = (size + align - 1) / align * align;
    if (data_ != nullptr && size_ >= size && align_ % align == 0) {
      return data_;
    }
    std::free(data_);  // NOLINT(cppcoreguidelines-no-malloc)
    // NOLINTNEXTLINE(cppcoreguidelines-no-malloc)
    data_ = static_cast<std::byte *>(std::aligned_alloc(align, size));
    size_ = data_ != nullptr ? size : 0;
    align_ = align;
    return data_;
  }

 private:
  std::byte *data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t align_ = 0;
};

thread_local StagingBuffer staging_buffer;

std::byte *staging(std::size_t size, std::size_t align) noexcept {
  return staging_buffer.get(size, align);
}

ssize_t sys_rw(Direction dir, int fd, std::byte *buf, std::size_t size, std::uint64_t offset) {
  ssize_t r = 0;
  do {
    r = dir == Direction::read ? ::pread(fd, buf, size, static_cast<off_t>(offset))
                               : ::pwrite(fd, buf, size, static_cast<off_t>(offset));
  } while (r < 0 && errno == EINTR);
  return r;
}

// Reads up to size bytes, continuing short reads; returns bytes read (less
// than size only at end of file) or -1.
ssize_t read_fully(int fd, std::byte *buf, std::size_t size, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t r = sys_rw(Direction::read, fd, buf + done, size - done, offset + done);
    if (r < 0) {
      return -1;
    }
    if (r == 0) {
      break;
    }
    done += static_cast<std::size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

// Held across one block's read-modify-write.  Two unaligned writes whose
// bytes share an O_DIRECT block but no byte (neighbouring records, a
// caller's parallel pieces) would otherwise each write the block back as
// they read it, and the one that wrote first would lose its bytes.  Keyed
// by the file, not the descriptor, so that two descriptors of one file
// serialise too; striped, so that unrelated blocks rarely wait.  Other
// processes writing the same block are not covered (docs/architecture.md).
std::unique_lock<std::mutex> lock_block(int fd, std::uint64_t block_offset) {
  static std::array<std::mutex, 256> stripes;
  struct stat st = {};
  std::size_t key = std::hash<std::uint64_t>{}(block_offset);
  if (::fstat(fd, &st) == 0) {
    key ^= std::hash<std::uint64_t>{}(static_cast<std::uint64_t>(st.st_ino) * 0x9e3779b97f4a7c15U ^
                                      static_cast<std::uint64_t>(st.st_dev));
  } else {
    key ^= std::hash<int>{}(fd);  // the write that follows reports the descriptor's error
  }
  return std::unique_lock(stripes[key % stripes.size()]);
}

// One unaligned piece [offset, offset + size) lying inside a single block of
// policy.offset_align bytes.  Returns bytes moved for this piece (short only
// at end of file for reads) or -1.
ssize_t staged_piece(Direction dir, int fd, std::byte *buf, std::size_t size, std::uint64_t offset,
                     const IoPolicy &policy) {
  const std::size_t block = policy.offset_align;
  const std::uint64_t block_offset = offset - offset % block;
  const auto inside = static_cast<std::size_t>(offset - block_offset);
  std::byte *bounce = staging(block, policy.memory_align);
  if (bounce == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  std::unique_lock<std::mutex> rmw;
  if (dir == Direction::write) {
    rmw = lock_block(fd, block_offset);
  }
  const ssize_t got = read_fully(fd, bounce, block, block_offset);
  if (got < 0) {
    return -1;
  }
  const auto valid = static_cast<std::size_t>(got);
  if (dir == Direction::read) {
    const std::size_t available = valid > inside ? valid - inside : 0;
    const std::size_t n = std::min(size, available);
    std::memcpy(buf, bounce + inside, n);
    return static_cast<ssize_t>(n);
  }
  // Read-modify-write.  Bytes past the old end of file are zero, as a sparse
  // extension would read; if the block held the end of file, the file is cut
  // back afterwards so it ends where the old end or this write ends.
  std::memset(bounce + valid, 0, block - valid);
  std::memcpy(bounce + inside, buf, size);
  const ssize_t put = sys_rw(Direction::write, fd, bounce, block, block_offset);
  if (put < 0) {
    return -1;
  }
  if (static_cast<std::size_t>(put) != block) {
    errno = EIO;
    return -1;
  }
  if (valid < block) {
    const std::uint64_t end = std::max<std::uint64_t>(block_offset + valid, offset + size);
    if (end < block_offset + block && ::ftruncate(fd, static_cast<off_t>(end)) != 0) {
      return -1;
    }
  }
  return static_cast<ssize_t>(size);
}

// Aligned file range, misaligned memory: go through the staging buffer in
// chunk-sized, block-aligned steps.
ssize_t bounced_body(Direction dir, int fd, std::byte *buf, std::size_t size, std::uint64_t offset,
                     const IoPolicy &policy, std::size_t chunk) {
  const std::size_t step =
      std::max(policy.offset_align, chunk / policy.offset_align * policy.offset_align);
  const std::size_t n = std::min(size, step);
  std::byte *bounce = staging(n, policy.memory_align);
  if (bounce == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  if (dir == Direction::read) {
    const ssize_t r = sys_rw(dir, fd, bounce, n, offset);
    if (r > 0) {
      std::memcpy(buf, bounce, static_cast<std::size_t>(r));
    }
    return r;
  }
  std::memcpy(bounce, buf, n);
  return sys_rw(dir, fd, bounce, n, offset);
}

// With CONFIG_PCI_P2PDMA the block layer hands device (P2P) pages only to
// queues that take P2P memory and only when the PCI distance allows it;
// elsewhere (NFS, NVMe over TCP, device-mapper, a drive across the root
// complex) the syscall fails with EREMOTEIO and moves nothing.  The request
// then goes on through the staging buffer, which the CPU copies to or from
// device memory: slower, but the data arrives.  Said once per process at
// PHX_LOG=warn.
void note_p2p_refused(int fd) noexcept {
  static std::atomic<bool> said{false};
  if (said.exchange(true) || !log_enabled(LogLevel::warn)) {
    return;
  }
  try {
    log(LogLevel::warn, "fd " + std::to_string(fd) +
                            ": the kernel refused peer-to-peer DMA to device memory (EREMOTEIO: "
                            "storage without P2PDMA support, or too far on the PCI bus); "
                            "staging through host memory instead");
  } catch (...) {  // NOLINT(bugprone-empty-catch): a lost log line loses no data
  }
}

}  // namespace

bool is_aligned(const std::byte *buf, std::size_t size, std::uint64_t offset,
                const IoPolicy &policy) noexcept {
  if (!policy.direct) {
    return true;
  }
  const auto address = reinterpret_cast<std::uintptr_t>(buf);
  return address % policy.memory_align == 0 && offset % policy.offset_align == 0 &&
         size % policy.offset_align == 0;
}

TransferResult transfer(Direction dir, int fd, std::byte *buf, std::size_t size,
                        std::uint64_t offset, const IoPolicy &policy) noexcept {
  const std::size_t max_syscall = policy.max_syscall != 0 ? policy.max_syscall : kMaxSyscallBytes;
  // The staging size matters only when memory must be bounced: look up the
  // process default then, not on every aligned request.
  std::size_t chunk = policy.chunk_size;
  const auto chunk_size = [&chunk]() noexcept -> bool {
    if (chunk != 0) {
      return true;
    }
    try {
      chunk = Options::defaults().staging_bytes;
      return true;
    } catch (...) {
      return false;
    }
  };
  const std::size_t block = policy.direct ? std::max<std::size_t>(policy.offset_align, 1) : 1;
  const std::size_t mem_align = policy.direct ? std::max<std::size_t>(policy.memory_align, 1) : 1;
  // Keep syscall sizes whole blocks so O_DIRECT bodies stay aligned.
  const std::size_t max_body = std::max(block, max_syscall / block * block);

  std::size_t done = 0;
  bool p2p_refused = false;
  while (done < size) {
    std::byte *p = buf + done;
    const std::uint64_t off = offset + done;
    const std::size_t remaining = size - done;
    ssize_t r = 0;
    const auto misalign = static_cast<std::size_t>(off % block);
    if (misalign != 0 || remaining < block) {
      const std::size_t piece = std::min(remaining, block - misalign);
      r = staged_piece(dir, fd, p, piece, off, policy);
      if (r >= 0 && static_cast<std::size_t>(r) < piece) {
        done += static_cast<std::size_t>(r);
        break;  // end of file inside the block
      }
    } else {
      const std::size_t body = std::min(remaining / block * block, max_body);
      if (reinterpret_cast<std::uintptr_t>(p) % mem_align == 0 && !p2p_refused) {
        r = sys_rw(dir, fd, p, body, off);
        if (r < 0 && errno == EREMOTEIO && chunk_size()) {
          note_p2p_refused(fd);
          p2p_refused = true;
          r = bounced_body(dir, fd, p, body, off, policy, chunk);
        }
      } else if (chunk_size()) {
        r = bounced_body(dir, fd, p, body, off, policy, chunk);
      } else {
        return {done, EINVAL};  // malformed PHX_STAGING_SIZE (or the old PHX_CHUNK_SIZE)
      }
    }
    if (r < 0) {
      return {done, errno};
    }
    if (r == 0) {
      if (dir == Direction::write) {
        return {done, EIO};  // a zero-byte write of a non-empty buffer
      }
      break;  // end of file
    }
    done += static_cast<std::size_t>(r);
  }
  return {done, 0};
}

}  // namespace phx::detail
