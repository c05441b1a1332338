// SPDX-License-Identifier: MIT
// The shim's own settings in one place, so that wiring them to phx::Options
// later touches this file only.  Read from the environment once.
#ifndef PHOENIX_CUFILE_SHIM_SETTINGS_HPP
#define PHOENIX_CUFILE_SHIM_SETTINGS_HPP

#include <cstddef>

namespace phx::cufile_shim {

struct Settings {
  /// Phoenix device for memory the CUDA driver does not know (no driver, or
  /// the rig's BAR standing in for GPU memory).  PHX_CUFILE_DEVICE, default 0.
  int default_device = 0;
  /// Threads that run batch entries.  PHX_CUFILE_BATCH_THREADS, default 8.
  unsigned batch_threads = 8;
  /// CUDA allocations kept registered for I/O on unregistered buffers.
  /// PHX_CUFILE_CACHE_ENTRIES, default 64.
  std::size_t cache_entries = 64;
  /// Largest batch cuFileBatchIOSetUp accepts (reported as max_batch_io_size).
  unsigned max_batch_entries = 1U << 16;
};

/// The settings, read from the environment on first use.
[[nodiscard]] const Settings &settings() noexcept;

/// What the cuFileDriverSet* calls record (cuFile's units: KiB).  Phoenix
/// has no use for them yet: cuFileDriverGetProperties reports them back.
struct Tunables {
  bool poll_mode = false;
  std::size_t poll_threshold_kib = 4;
  std::size_t max_direct_io_kib = 16384;
  std::size_t max_cache_kib = 131072;
  std::size_t max_pinned_kib = 33554432;
};
[[nodiscard]] Tunables tunables() noexcept;
void set_poll_mode(bool poll, std::size_t threshold_kib) noexcept;
void set_max_direct_io(std::size_t kib) noexcept;
void set_max_cache(std::size_t kib) noexcept;
void set_max_pinned(std::size_t kib) noexcept;

}  // namespace phx::cufile_shim

#endif  // PHOENIX_CUFILE_SHIM_SETTINGS_HPP
