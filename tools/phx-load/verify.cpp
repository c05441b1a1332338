// SPDX-License-Identifier: MIT
#include "verify.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <system_error>

#include "common/fd.hpp"

namespace phx::load_tool {

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
  std::map<const safetensors::FileHeader *, phxtools::UniqueFd> fds;
  std::vector<std::byte> expected;
  std::vector<std::byte> actual;
  for (const safetensors::LoadedTensor &t : loaded.tensors) {
    const safetensors::FileHeader &file = *file_of.at(t.info);
    auto &fd = fds[&file];
    if (!fd) {
      fd = phxtools::open_fd(file.path.string(), O_RDONLY);
    }
    const std::size_t size = t.info->size();
    expected.resize(size);
    actual.resize(size);
    phxtools::pread_all(fd.get(), std::span(expected).first(size),
                        file.data_offset() + t.info->begin, file.path.string());
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
