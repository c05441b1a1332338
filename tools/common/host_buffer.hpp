// SPDX-License-Identifier: MIT
// Page-aligned, pre-faulted host memory (O_DIRECT needs the alignment; the
// pre-fault keeps first-touch page faults out of the measured loop).
#ifndef PHX_TOOLS_HOST_BUFFER_HPP
#define PHX_TOOLS_HOST_BUFFER_HPP

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>

namespace phxtools {

class HostBuffer {
 public:
  static constexpr std::size_t kAlign = 4096;

  explicit HostBuffer(std::size_t bytes)
      : size_(bytes), data_(static_cast<std::byte *>(std::aligned_alloc(kAlign, round_up(bytes)))) {
    if (!data_) {
      throw std::bad_alloc();
    }
    std::memset(data_.get(), 0, round_up(bytes));
  }

  [[nodiscard]] std::byte *data() const noexcept { return data_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<std::byte> span() const noexcept { return {data_.get(), size_}; }

  [[nodiscard]] static constexpr std::size_t round_up(std::size_t bytes) noexcept {
    return (bytes + kAlign - 1) / kAlign * kAlign;
  }

 private:
  struct Free {
    void operator()(std::byte *p) const noexcept { std::free(p); }
  };
  std::size_t size_;
  std::unique_ptr<std::byte, Free> data_;
};

}  // namespace phxtools

#endif  // PHX_TOOLS_HOST_BUFFER_HPP
