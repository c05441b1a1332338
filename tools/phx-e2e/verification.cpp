// SPDX-License-Identifier: MIT
#include "verification.hpp"

#include <algorithm>
#include <span>

#include "common/pattern.hpp"

namespace phx_e2e {

void Verification::check(const Loader &loader, std::size_t buffer_offset, std::size_t size,
                         std::uint64_t file_offset) {
  if (!enabled_) {
    return;
  }
  // Pieces of at most 16 MiB, so a whole-file check needs no file-sized copy.
  constexpr std::size_t kPiece = std::size_t{16} << 20;
  scratch_.resize(std::min(size, kPiece));
  bool mismatched = false;
  for (std::size_t done = 0; done < size;) {
    const std::size_t n = std::min(kPiece, size - done);
    const std::span<std::byte> piece(scratch_.data(), n);
    loader.copy_out(buffer_offset + done, piece);
    if (const auto bad = phxtools::find_mismatch(piece, file_offset + done); bad && !mismatched) {
      mismatched = true;
      if (!first_mismatch_ || *bad < *first_mismatch_) {
        first_mismatch_ = *bad;
      }
    }
    done += n;
  }
  bytes_checked_ += size;
  mismatched_reads_ += mismatched ? 1 : 0;
}

}  // namespace phx_e2e
