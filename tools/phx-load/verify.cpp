// SPDX-License-Identifier: MIT
#include "verify.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <system_error>

namespace phx::load_tool {
namespace {

void read_exact(int fd, std::byte *dst, std::size_t size, std::uint64_t offset,
                const std::string &path) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, dst + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw std::system_error(n < 0 ? errno : EIO, std::system_category(),
                              "verify: read " + path + " at " + std::to_string(offset + done));
    }
    done += static_cast<std::size_t>(n);
  }
}

class Fd {
 public:
  explicit Fd(const std::string &path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) {
      throw std::system_error(errno, std::system_category(), "verify: open " + path);
    }
  }
  ~Fd() { (void)::close(fd_); }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  Fd(Fd &&) = delete;
  Fd &operator=(Fd &&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace

VerifyResult verify(const safetensors::LoadedCheckpoint &loaded) {
  const auto start = std::chrono::steady_clock::now();
  VerifyResult result;
  // The file of each tensor, by the address of its header entry.
  std::map<const safetensors::TensorInfo *, const safetensors::FileHeader *> file_of;
  for (const safetensors::FileHeader &f : loaded.checkpoint.files) {
    for (const safetensors::TensorInfo &t : f.tensors) {
      file_of.emplace(&t, &f);
    }
  }
  std::map<const safetensors::FileHeader *, std::unique_ptr<Fd>> fds;
  std::vector<std::byte> expected;
  std::vector<std::byte> actual;
  for (const safetensors::LoadedTensor &t : loaded.tensors) {
    const safetensors::FileHeader &file = *file_of.at(t.info);
    auto &fd = fds[&file];
    if (!fd) {
      fd = std::make_unique<Fd>(file.path.string());
    }
    const std::size_t size = t.info->size();
    expected.resize(size);
    actual.resize(size);
    read_exact(fd->get(), expected.data(), size, file.data_offset() + t.info->begin,
               file.path.string());
    safetensors::copy_to_host(t, actual);
    const auto diff = std::mismatch(expected.begin(), expected.end(), actual.begin());
    if (diff.first != expected.end()) {
      result.mismatches.push_back(t.info->name + ": first difference at byte " +
                                  std::to_string(diff.first - expected.begin()));
    }
    ++result.tensors;
    result.bytes += size;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace phx::load_tool
