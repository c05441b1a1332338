// SPDX-License-Identifier: MIT
// Pinned (page-locked) host memory for the compat engine's staging buffers.
// Allocated once per copy worker, reused for every chunk, freed with the
// engine: staging memory is bounded by threads x depth x chunk.
#ifndef PHOENIX_LIB_STAGING_POOL_HPP
#define PHOENIX_LIB_STAGING_POOL_HPP

#include <cstddef>

namespace phx::detail {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  /// cuMemHostAlloc (portable, page aligned).  Throws std::system_error.
  explicit PinnedBuffer(std::size_t size);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer &&other) noexcept;
  PinnedBuffer &operator=(PinnedBuffer &&other) noexcept;
  PinnedBuffer(const PinnedBuffer &) = delete;
  PinnedBuffer &operator=(const PinnedBuffer &) = delete;

  [[nodiscard]] std::byte *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  std::byte *data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_STAGING_POOL_HPP
