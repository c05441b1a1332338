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

#include "../phxbench/unique_fd.hpp"

namespace phx::kvcache {
namespace {

constexpr std::size_t kProbe = 4096;
constexpr std::size_t kChunk = std::size_t{8} << 20;

[[noreturn]] void fail(const std::string &what) {
  throw std::system_error(errno, std::generic_category(), what);
}

int open_file(const std::filesystem::path &path, int flags) {
  return ::open(path.c_str(), flags | O_CLOEXEC, 0644);  // NOLINT(*-vararg)
}

bool matches_at(int fd, std::uint64_t offset) {
  std::vector<std::byte> buf(kProbe);
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
  return n == static_cast<ssize_t>(buf.size()) && first_mismatch(buf, offset) == buf.size();
}

}  // namespace

std::uint64_t pattern_word(std::uint64_t offset) noexcept {
  // splitmix64 of the word index: neighbouring blocks never look alike.
  std::uint64_t z = (offset / 8) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void fill_pattern(std::span<std::byte> dst, std::uint64_t offset) noexcept {
  for (std::size_t i = 0; i + 8 <= dst.size(); i += 8) {
    const std::uint64_t w = pattern_word(offset + i);
    std::memcpy(dst.data() + i, &w, 8);
  }
}

std::size_t first_mismatch(std::span<const std::byte> data, std::uint64_t offset) noexcept {
  for (std::size_t i = 0; i + 8 <= data.size(); i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, data.data() + i, 8);
    if (w != pattern_word(offset + i)) {
      return i;
    }
  }
  return data.size();
}

bool ensure_kv_file(const std::filesystem::path &path, std::uint64_t size) {
  size = (size + kProbe - 1) / kProbe * kProbe;
  {
    const phxbench::UniqueFd fd(open_file(path, O_RDONLY));
    struct stat st = {};
    if (fd.get() >= 0 && ::fstat(fd.get(), &st) == 0 &&
        static_cast<std::uint64_t>(st.st_size) >= size && matches_at(fd.get(), 0) &&
        matches_at(fd.get(), size - kProbe)) {
      return false;
    }
  }
  const phxbench::UniqueFd fd(open_file(path, O_WRONLY | O_CREAT | O_TRUNC));
  if (fd.get() < 0) {
    fail("create " + path.string());
  }
  std::vector<std::byte> chunk(kChunk);
  for (std::uint64_t at = 0; at < size; at += kChunk) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, size - at));
    fill_pattern({chunk.data(), n}, at);
    for (std::size_t done = 0; done < n;) {
      const ssize_t w =
          ::pwrite(fd.get(), chunk.data() + done, n - done, static_cast<off_t>(at + done));
      if (w < 0 && errno == EINTR) {
        continue;
      }
      if (w <= 0) {
        fail("write " + path.string() + " at " + std::to_string(at + done));
      }
      done += static_cast<std::size_t>(w);
    }
  }
  if (::fsync(fd.get()) != 0) {
    fail("fsync " + path.string());
  }
  return true;
}

}  // namespace phx::kvcache
