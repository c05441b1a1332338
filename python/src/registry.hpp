// SPDX-License-Identifier: MIT
// Registrations made once and reused.  Each (device, engine) opened from
// Python has one table of live registrations: explicit ones (Device.register)
// and transient ones that an I/O makes for an unregistered buffer and drops
// when the last I/O using it ends.  An I/O whose buffer lies inside a live
// registration uses it: no pin-and-map per call, and two threads reading
// into one buffer share one registration instead of racing to EEXIST.
#ifndef PHOENIX_PYTHON_REGISTRY_HPP
#define PHOENIX_PYTHON_REGISTRY_HPP

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "phoenix/gather.hpp"
#include "phoenix/phoenix.hpp"

namespace phx::python {

/// One live registration.  Guarded by its DeviceEntry's mutex.
struct RegEntry {
  std::uintptr_t start = 0;
  std::size_t size = 0;
  phx::Registration reg;
  int handles = 0;  ///< open Registration objects
  int users = 0;    ///< I/Os in flight
};

/// A byte range of process memory.
struct Range {
  std::uintptr_t start = 0;
  std::size_t size = 0;
  [[nodiscard]] std::uintptr_t end() const noexcept { return start + size; }
};

/// The registration an I/O uses for one range, and where the range starts in it.
struct Use {
  std::shared_ptr<RegEntry> entry;
  std::size_t offset = 0;
};

/// An opened device and its registrations; lives for the process (engines
/// keep threads and staging memory, and the CUDA driver may be gone at exit).
class DeviceEntry {
 public:
  DeviceEntry(int id, const phx::Options &options, bool cpu);

  [[nodiscard]] phx::Device &device() noexcept { return device_; }
  [[nodiscard]] bool cpu() const noexcept { return cpu_; }

  /// An explicit registration of @p range: shares a live one that covers it,
  /// waits for transient ones that overlap it, registers otherwise.  Throws
  /// std::system_error (EINVAL: overlaps an explicit registration without
  /// lying inside it; and register_memory's errors).
  [[nodiscard]] std::shared_ptr<RegEntry> open(Range range);
  /// Drops an explicit registration; deregisters when no I/O uses it.
  void close(const std::shared_ptr<RegEntry> &entry);

  /// Registrations for the I/Os of @p ranges (one Use each, in order), taken
  /// all at once so that threads waiting on each other cannot deadlock.  A
  /// range no live registration covers registers its extent (the whole
  /// buffer it lies in, same length as @p ranges), so that I/Os into other
  /// parts of that buffer share it; the range alone where the extent would
  /// overlap an explicit registration.
  [[nodiscard]] std::vector<Use> acquire(std::span<const Range> ranges,
                                         std::span<const Range> extents);
  /// Ends the I/Os acquire() started.
  void release(std::span<const Use> uses);

  /// The device's gatherer (many file ranges into one registration as few
  /// large requests), started on first use; null when the engine has no
  /// gather (cufile).  Its operations run one at a time.
  [[nodiscard]] phx::Gather *gather();

  /// Whether a live registration covers @p range.
  [[nodiscard]] bool covers(Range range);
  /// Live registrations (explicit and transient).
  [[nodiscard]] std::size_t count();
  /// register_memory calls made so far (each one pins and maps).
  [[nodiscard]] std::uint64_t registered_total();

 private:
  // Under mutex_: the entry covering @p r, else null; *blocked when a
  // transient entry overlaps r (wait), throws when an explicit one does.
  std::shared_ptr<RegEntry> covering(Range r, bool *blocked);
  std::shared_ptr<RegEntry> add(Range r);
  bool covered(Range r) const;
  bool overlaps_explicit(Range r) const;

  phx::Device device_;
  bool cpu_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::map<std::uintptr_t, std::shared_ptr<RegEntry>> entries_;
  std::uint64_t registered_total_ = 0;
  std::once_flag gather_once_;
  std::unique_ptr<phx::Gather> gather_;
};

/// The process's entry for (@p id, @p engine resolved), opened on first use
/// with @p options (null: the process defaults).  @p cpu: host memory (the
/// host engine on device 0).  Throws std::system_error(EBUSY) when the entry
/// is open already with other options than @p options.
[[nodiscard]] std::shared_ptr<DeviceEntry> device_entry(int id, phx::Engine engine, bool cpu,
                                                        const phx::Options *options = nullptr);

/// Entries already opened for CUDA device @p id, or for host memory.
[[nodiscard]] std::vector<std::shared_ptr<DeviceEntry>> open_entries(int id, bool cpu);

/// Closes the devices that nothing uses any more (no Device object, no
/// registration, no I/O in flight) and returns how many.  Their engines are
/// then idle, for phx::release_idle_engines().
std::size_t close_unused_entries();

}  // namespace phx::python

#endif  // PHOENIX_PYTHON_REGISTRY_HPP
