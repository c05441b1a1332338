// SPDX-License-Identifier: MIT
// --verify: every byte a read put in the buffer is compared with the
// pattern the data file was written with (outside the timed steps).
#ifndef PHX_E2E_VERIFICATION_HPP
#define PHX_E2E_VERIFICATION_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "loader.hpp"

namespace phx_e2e {

class Verification {
 public:
  explicit Verification(bool enabled) : enabled_(enabled) {}

  /// Checks the @p size bytes read from @p file_offset to @p buffer_offset
  /// (nothing when disabled).
  void check(const Loader &loader, std::size_t buffer_offset, std::size_t size,
             std::uint64_t file_offset);

  [[nodiscard]] bool enabled() const noexcept { return enabled_; }
  [[nodiscard]] bool ok() const noexcept { return mismatched_reads_ == 0; }
  [[nodiscard]] std::uint64_t bytes_checked() const noexcept { return bytes_checked_; }
  [[nodiscard]] std::uint64_t mismatched_reads() const noexcept { return mismatched_reads_; }
  [[nodiscard]] std::optional<std::uint64_t> first_mismatch_offset() const noexcept {
    return first_mismatch_;
  }

 private:
  bool enabled_;
  std::uint64_t bytes_checked_ = 0;
  std::uint64_t mismatched_reads_ = 0;
  std::optional<std::uint64_t> first_mismatch_;
  std::vector<std::byte> scratch_;
};

}  // namespace phx_e2e

#endif  // PHX_E2E_VERIFICATION_HPP
