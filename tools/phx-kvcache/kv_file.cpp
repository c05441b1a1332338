// SPDX-License-Identifier: MIT
#include "kv_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "common/fd.hpp"
#include "common/pattern.hpp"
#include "common/pattern_file.hpp"

namespace phx::kvcache {
namespace {

constexpr std::size_t kProbe = 4096;

int open_file(const std::filesystem::path &path, int flags) {
  return ::open(path.c_str(), flags | O_CLOEXEC, 0644);  // NOLINT(*-vararg)
}

bool matches_at(int fd, std::uint64_t offset) {
  std::vector<std::byte> buf(kProbe);
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
  return n == static_cast<ssize_t>(buf.size()) && !phxtools::find_mismatch(buf, offset);
}

}  // namespace

bool ensure_kv_file(const std::filesystem::path &path, std::uint64_t size) {
  size = (size + kProbe - 1) / kProbe * kProbe;
  {
    const phxtools::UniqueFd fd(open_file(path, O_RDONLY));
    struct stat st = {};
    if (fd.get() >= 0 && ::fstat(fd.get(), &st) == 0 &&
        static_cast<std::uint64_t>(st.st_size) >= size && matches_at(fd.get(), 0) &&
        matches_at(fd.get(), size - kProbe)) {
      return false;
    }
  }
  phxtools::create_pattern_file(path.string(), size);
  return true;
}

}  // namespace phx::kvcache
