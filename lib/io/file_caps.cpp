// SPDX-License-Identifier: MIT
#include "io/file_caps.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/stat.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace phx::detail {
namespace {

// glibc's statx() wrapper may predate stx_dio_*; the kernel's struct has them.
bool dio_alignment(int fd, std::size_t &mem_align, std::size_t &offset_align) {
#ifdef STATX_DIOALIGN
  struct statx stx = {};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
  if (::syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN | STATX_TYPE, &stx) != 0) {
    return false;
  }
  if ((stx.stx_mask & STATX_DIOALIGN) != 0 && stx.stx_dio_mem_align != 0 &&
      stx.stx_dio_offset_align != 0) {
    mem_align = stx.stx_dio_mem_align;
    offset_align = stx.stx_dio_offset_align;
    return true;
  }
#else
  (void)fd;
  (void)mem_align;
  (void)offset_align;
#endif
  return false;
}

}  // namespace

bool policy_for_fd(int fd, IoPolicy &policy) noexcept {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) {
    return false;
  }
  policy.direct = (flags & O_DIRECT) != 0;
  if (!policy.direct) {
    policy.offset_align = 1;
    policy.memory_align = 1;
    return true;
  }
  std::size_t mem = 0;
  std::size_t off = 0;
  if (!dio_alignment(fd, mem, off)) {
    struct stat st = {};
    int logical_block = 0;
    if (::fstat(fd, &st) == 0 && S_ISBLK(st.st_mode) &&
        ::ioctl(fd, BLKSSZGET, &logical_block) == 0 &&  // NOLINT(cppcoreguidelines-pro-type-vararg)
        logical_block > 0) {
      mem = off = static_cast<std::size_t>(logical_block);
    } else {
      mem = off = kFallbackDirectAlign;
    }
  }
  policy.memory_align = mem;
  policy.offset_align = off;
  return true;
}

IoPolicy page_aligned_policy() noexcept {
  IoPolicy policy;
  policy.direct = true;
  policy.offset_align = kFallbackDirectAlign;
  policy.memory_align = kFallbackDirectAlign;
  return policy;
}

}  // namespace phx::detail
