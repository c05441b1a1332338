// SPDX-License-Identifier: MIT
// Whether O_DIRECT works where the data lives.  Without it the library falls
// back to buffered I/O, which cannot target device memory without a copy.
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/stat.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "common/fd.hpp"
#include "fs_types.hpp"
#include "probes.hpp"
#include "sysfs.hpp"

namespace phxcheck {
namespace {

constexpr std::size_t kPageSize = 4096;

struct AlignedFree {
  std::size_t align;
  void operator()(std::byte *p) const noexcept { ::operator delete (p, std::align_val_t{align}); }
};
using AlignedBuffer = std::unique_ptr<std::byte, AlignedFree>;

AlignedBuffer aligned_buffer(std::size_t size, std::size_t align) {
  auto *p = static_cast<std::byte *>(::operator new (size, std::align_val_t{align}));
  std::fill_n(p, size, std::byte{0});
  return {p, AlignedFree{align}};
}

std::string describe_kind(mode_t mode) {
  if (S_ISDIR(mode)) {
    return "directory";
  }
  if (S_ISREG(mode)) {
    return "regular file";
  }
  if (S_ISBLK(mode)) {
    return "block device";
  }
  return "other";
}

// EINVAL from open/fcntl with O_DIRECT is how the VFS says the filesystem has
// no direct I/O support; other errors say nothing about O_DIRECT.
std::string odirect_failure(const char *call, int err) {
  std::string text = std::string(call) + ": " + errno_message(err);
  if (err == EINVAL) {
    text += " (the filesystem has no direct I/O support)";
  }
  return text;
}

// glibc's statx() may predate stx_dio_*, so go to the kernel's struct.
void read_dio_alignment(int fd, PathProbe &probe) {
  struct statx stx = {};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): syscall(2) is variadic
  if (::syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) != 0) {
    probe.dio_align_note = "statx: " + errno_message(errno);
    return;
  }
  if ((stx.stx_mask & STATX_DIOALIGN) == 0U) {
    probe.dio_align_note = "not reported (kernel before 6.1 or filesystem does not tell)";
    return;
  }
  if (stx.stx_dio_mem_align == 0U || stx.stx_dio_offset_align == 0U) {
    probe.dio_align_note = "reported as 0: the filesystem says direct I/O is unsupported";
    return;
  }
  probe.dio_mem_align = stx.stx_dio_mem_align;
  probe.dio_offset_align = stx.stx_dio_offset_align;
}

std::size_t io_block(const PathProbe &probe) {
  return std::max({kPageSize, std::size_t{probe.dio_mem_align.value_or(0)},
                   std::size_t{probe.dio_offset_align.value_or(0)}});
}

// The flag being accepted is not the whole story (some FUSE and network
// filesystems accept it and fail the I/O), so move one block for real.
void try_io(int fd, bool writable, std::uint64_t size, PathProbe &probe) {
  const std::size_t block = io_block(probe);
  const AlignedBuffer buffer = aligned_buffer(block, block);
  const std::string bytes = std::to_string(block) + "-byte";
  if (writable) {
    if (::pwrite(fd, buffer.get(), block, 0) != static_cast<ssize_t>(block)) {
      probe.o_direct = false;
      probe.o_direct_reason =
          "O_DIRECT accepted but a " + bytes + " pwrite failed: " + errno_message(errno);
      return;
    }
  } else if (size < block) {
    probe.o_direct = true;
    probe.o_direct_reason = "O_DIRECT accepted; no read tried (smaller than one " +
                            std::to_string(block) + "-byte block)";
    return;
  }
  if (::pread(fd, buffer.get(), block, 0) != static_cast<ssize_t>(block)) {
    probe.o_direct = false;
    probe.o_direct_reason =
        "O_DIRECT accepted but a " + bytes + " pread failed: " + errno_message(errno);
    return;
  }
  probe.o_direct = true;
  probe.o_direct_reason = writable ? "O_DIRECT " + bytes + " write and read succeeded"
                                   : "O_DIRECT " + bytes + " read succeeded";
}

// An unnamed file leaves nothing behind even if we are killed; filesystems
// without O_TMPFILE get a named one that is unlinked at once.
phxtools::UniqueFd make_temp_file(const std::string &dir, PathProbe &probe) {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): open(2) is variadic
  phxtools::UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (fd) {
    probe.method = "temporary file (O_TMPFILE)";
    return fd;
  }
  const int tmpfile_err = errno;
  std::string name = dir + "/.phxfs-check-XXXXXX";
  fd.reset(::mkostemp(name.data(), O_CLOEXEC));
  if (!fd) {
    probe.method = "temporary file";
    probe.o_direct_reason =
        "cannot create a temporary file: O_TMPFILE: " + errno_message(tmpfile_err) +
        "; mkstemp: " + errno_message(errno);
    return fd;
  }
  ::unlink(name.c_str());
  probe.method = "temporary file (mkstemp, unlinked)";
  return fd;
}

void probe_directory(const std::string &dir, PathProbe &probe) {
  const phxtools::UniqueFd fd = make_temp_file(dir, probe);
  if (!fd) {
    return;
  }
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): fcntl(2) is variadic
  const int flags = ::fcntl(fd.get(), F_GETFL);
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): fcntl(2) is variadic
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_DIRECT) != 0) {
    probe.o_direct = false;
    probe.o_direct_reason = odirect_failure("fcntl(F_SETFL, O_DIRECT)", errno);
    return;
  }
  read_dio_alignment(fd.get(), probe);
  try_io(fd.get(), true, 0, probe);
}

std::uint64_t readable_size(int fd, const struct stat &st) {
  if (S_ISBLK(st.st_mode)) {
    std::uint64_t bytes = 0;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): ioctl(2) is variadic
    return ::ioctl(fd, BLKGETSIZE64, &bytes) == 0 ? bytes : 0;
  }
  return static_cast<std::uint64_t>(st.st_size);
}

// Existing data is only ever read: the file may be someone's dataset.
void probe_existing(const std::string &path, const struct stat &st, PathProbe &probe) {
  probe.method = "opened read-only with O_DIRECT";
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): open(2) is variadic
  const phxtools::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  if (!fd) {
    const int err = errno;
    if (err == EINVAL) {
      probe.o_direct = false;
    }
    probe.o_direct_reason = odirect_failure("open(O_RDONLY | O_DIRECT)", err);
    return;
  }
  read_dio_alignment(fd.get(), probe);
  try_io(fd.get(), false, readable_size(fd.get(), st), probe);
}

}  // namespace

PathProbe probe_path(const std::string &path) {
  PathProbe probe;
  probe.path = path;
  struct stat st = {};
  if (::stat(path.c_str(), &st) != 0) {
    probe.kind = "missing";
    probe.error = "stat: " + errno_message(errno);
    return probe;
  }
  probe.kind = describe_kind(st.st_mode);
  struct statfs fs = {};
  if (S_ISBLK(st.st_mode)) {
    // statfs would name the filesystem holding the node (devtmpfs), not the data.
    probe.fs_type = "none (raw block device)";
  } else if (::statfs(path.c_str(), &fs) == 0) {
    // Magic numbers are 32-bit; f_type's width varies by architecture.
    probe.fs_magic = static_cast<std::uint32_t>(fs.f_type);
    probe.fs_type = fs_type_name(*probe.fs_magic);
  } else {
    probe.fs_type = "unknown (statfs: " + errno_message(errno) + ")";
  }
  if (S_ISDIR(st.st_mode)) {
    probe_directory(path, probe);
  } else if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
    probe_existing(path, st, probe);
  } else {
    probe.o_direct_reason = "not tried: not a directory, regular file or block device";
  }
  return probe;
}

}  // namespace phxcheck
