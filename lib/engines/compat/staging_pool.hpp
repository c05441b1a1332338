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
  /// Staging private to this process's engines, pinned so that the driver
  /// holds other threads' copies back for as short a time as it can: from
  /// kHugeStaging bytes up, anonymous memory on transparent huge pages,
  /// faulted in by the calling thread and then registered
  /// (cuMemHostRegister, portable); smaller, or where the driver will not
  /// register it, cuMemHostAlloc.  Not inherited by forked children (they
  /// never use their parent's engines).  Throws std::system_error.
  [[nodiscard]] static PinnedBuffer staging(std::size_t size);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer &&other) noexcept;
  PinnedBuffer &operator=(PinnedBuffer &&other) noexcept;
  PinnedBuffer(const PinnedBuffer &) = delete;
  PinnedBuffer &operator=(const PinnedBuffer &) = delete;

  [[nodiscard]] std::byte *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Whether staging() registered its own mapping (false: cuMemHostAlloc).
  [[nodiscard]] bool registered() const noexcept { return mapped_ != 0; }

  /// One transparent huge page: staging() registers buffers of at least this.
  static constexpr std::size_t kHugeStaging = std::size_t{2} << 20;

 private:
  void release() noexcept;

  std::byte *data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;  // bytes of our own mapping at data_ (registered), else 0
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_STAGING_POOL_HPP
