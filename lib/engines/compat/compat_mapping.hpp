// SPDX-License-Identifier: MIT
// A compat-engine registration remembers the CUDA allocation it was made
// in by buffer ID, which CUDA never reuses in a process: I/O can then tell
// that the memory was freed since, even when a new allocation took the
// same address (the address alone cannot tell).
#ifndef PHOENIX_LIB_COMPAT_MAPPING_HPP
#define PHOENIX_LIB_COMPAT_MAPPING_HPP

#include <string>

#include "core/mapping.hpp"

namespace phx::detail {

class CompatMapping final : public Mapping {
 public:
  CompatMapping(std::uintptr_t address, std::size_t size,
                unsigned long long buffer_id) noexcept  // NOLINT(google-runtime-int)
      : Mapping(address, size, nullptr), buffer_id_(buffer_id) {}

  [[nodiscard]] unsigned long long buffer_id() const noexcept {  // NOLINT(google-runtime-int)
    return buffer_id_;
  }
  /// Empty while the CUDA allocation is alive; else why not (one driver call).
  [[nodiscard]] std::string lost() const override;

 private:
  unsigned long long buffer_id_;  // NOLINT(google-runtime-int): the ABI's type
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_COMPAT_MAPPING_HPP
