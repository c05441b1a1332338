// SPDX-License-Identifier: MIT
// Device address -> registration, for the C API and pointer lookups.
// An ordered map keyed by start address gives O(log n) interval lookup;
// a reader/writer lock lets every I/O thread look up concurrently.
#ifndef PHOENIX_LIB_REGISTRATION_TABLE_HPP
#define PHOENIX_LIB_REGISTRATION_TABLE_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <vector>

#include "core/mapping.hpp"

namespace phx::detail {

class RegistrationTable {
 public:
  /// Claims [address, address + size) before the (slow) mapping is made, so
  /// two threads cannot register overlapping ranges.  Returns 0, EEXIST (the
  /// same range is registered or being registered) or EINVAL (partial
  /// overlap, empty or wrapping range).
  [[nodiscard]] int reserve(std::uintptr_t address, std::size_t size);
  /// Attaches the mapping to a reserved range.
  void publish(const std::shared_ptr<Mapping> &mapping);
  /// Drops a reservation whose mapping failed.
  void cancel(std::uintptr_t address) noexcept;

  /// The registration wholly containing [address, address + size), or null.
  [[nodiscard]] std::shared_ptr<Mapping> find(std::uintptr_t address, std::size_t size) const;

  /// Removes the registration that starts at @p address and is exactly @p
  /// size long.  Returns it (the caller drops the last table reference) or
  /// null when there is none.  With @p expected, only that very mapping is
  /// removed (a RAII handle must not drop a later registration of its range).
  [[nodiscard]] std::shared_ptr<Mapping> remove(std::uintptr_t address, std::size_t size,
                                                const Mapping *expected = nullptr);
  /// Removes every published registration.
  [[nodiscard]] std::vector<std::shared_ptr<Mapping>> clear();

  [[nodiscard]] std::size_t size() const;

 private:
  struct Entry {
    std::size_t size = 0;
    std::shared_ptr<Mapping> mapping;  // null while the registration is made
  };
  mutable std::shared_mutex mutex_;
  std::map<std::uintptr_t, Entry> entries_;
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_REGISTRATION_TABLE_HPP
