// SPDX-License-Identifier: MIT
// A registered range: the device address the user named and the host view
// through which I/O reaches it.  Engines subclass it to own what must be
// undone (munmap + DEREGISTER for the direct engine).  Shared ownership lets
// I/O in flight keep a mapping alive after it was deregistered.
#ifndef PHOENIX_LIB_MAPPING_HPP
#define PHOENIX_LIB_MAPPING_HPP

#include <cstddef>
#include <cstdint>
#include <string>

namespace phx::detail {

class Mapping {
 public:
  Mapping(std::uintptr_t device_address, std::size_t size, std::byte *host_view) noexcept
      : device_address_(device_address), size_(size), host_view_(host_view) {}
  virtual ~Mapping() = default;
  Mapping(const Mapping &) = delete;
  Mapping &operator=(const Mapping &) = delete;
  Mapping(Mapping &&) = delete;
  Mapping &operator=(Mapping &&) = delete;

  [[nodiscard]] std::uintptr_t device_address() const noexcept { return device_address_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::byte *host_view() const noexcept { return host_view_; }
  [[nodiscard]] bool contains(std::uintptr_t address, std::size_t length) const noexcept {
    return address >= device_address_ && length <= size_ &&
           address - device_address_ <= size_ - length;
  }
  /// Empty while the memory is still what was registered; else why not, in
  /// words, for an EFAULT.  Engines whose memory can go away behind the
  /// library's back (compat: cudaFree) override it.
  [[nodiscard]] virtual std::string lost() const { return {}; }

 private:
  std::uintptr_t device_address_;
  std::size_t size_;
  std::byte *host_view_;
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_MAPPING_HPP
