// SPDX-License-Identifier: MIT
#include "core/registration_table.hpp"

#include <cerrno>
#include <mutex>

namespace phx::detail {

int RegistrationTable::reserve(std::uintptr_t address, std::size_t size) {
  if (size == 0 || address + size < address) {
    return EINVAL;
  }
  const std::uintptr_t end = address + size;
  const std::unique_lock lock(mutex_);
  auto next = entries_.lower_bound(address);
  if (next != entries_.end()) {
    if (next->first == address) {
      return next->second.size == size ? EEXIST : EINVAL;
    }
    if (next->first < end) {
      return EINVAL;
    }
  }
  if (next != entries_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > address) {
      return EINVAL;
    }
  }
  entries_.emplace_hint(next, address, Entry{size, nullptr});
  return 0;
}

void RegistrationTable::publish(const std::shared_ptr<Mapping> &mapping) {
  const std::unique_lock lock(mutex_);
  auto it = entries_.find(mapping->device_address());
  if (it != entries_.end()) {
    it->second.mapping = mapping;
  }
}

void RegistrationTable::cancel(std::uintptr_t address) noexcept {
  const std::unique_lock lock(mutex_);
  entries_.erase(address);
}

std::shared_ptr<Mapping> RegistrationTable::find(std::uintptr_t address, std::size_t size) const {
  const std::shared_lock lock(mutex_);
  auto it = entries_.upper_bound(address);
  if (it == entries_.begin()) {
    return nullptr;
  }
  --it;
  const auto &mapping = it->second.mapping;
  if (!mapping || !mapping->contains(address, size)) {
    return nullptr;
  }
  return mapping;
}

std::shared_ptr<Mapping> RegistrationTable::remove(std::uintptr_t address, std::size_t size,
                                                   const Mapping *expected) {
  const std::unique_lock lock(mutex_);
  auto it = entries_.find(address);
  if (it == entries_.end() || it->second.size != size || !it->second.mapping ||
      (expected != nullptr && it->second.mapping.get() != expected)) {
    return nullptr;
  }
  auto mapping = std::move(it->second.mapping);
  entries_.erase(it);
  return mapping;
}

std::vector<std::shared_ptr<Mapping>> RegistrationTable::clear() {
  std::vector<std::shared_ptr<Mapping>> removed;
  const std::unique_lock lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.mapping) {
      removed.push_back(std::move(it->second.mapping));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return removed;
}

std::size_t RegistrationTable::size() const {
  const std::shared_lock lock(mutex_);
  return entries_.size();
}

}  // namespace phx::detail
