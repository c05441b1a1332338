// SPDX-License-Identifier: MIT
#include "cufile_shim/settings.hpp"

#include <charconv>
#include <cstdlib>
#include <mutex>
#include <string_view>

namespace phx::cufile_shim {
namespace {

template <typename T>
void read_env(const char *name, T &value, T min, T max) {
  const char *text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): once, at first use
  if (text == nullptr) {
    return;
  }
  const std::string_view s(text);
  T parsed{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), parsed);
  if (ec == std::errc() && end == s.data() + s.size() && parsed >= min && parsed <= max) {
    value = parsed;
  }
}

std::mutex &tunables_mutex() {
  static std::mutex m;
  return m;
}

Tunables &tunables_storage() {
  static Tunables t;
  return t;
}

}  // namespace

const Settings &settings() noexcept {
  static const Settings s = [] {
    Settings out;
    read_env("PHX_CUFILE_DEVICE", out.default_device, 0, 1023);
    read_env("PHX_CUFILE_BATCH_THREADS", out.batch_threads, 1U, 256U);
    read_env("PHX_CUFILE_CACHE_ENTRIES", out.cache_entries, std::size_t{1}, std::size_t{1} << 20);
    return out;
  }();
  return s;
}

Tunables tunables() noexcept {
  const std::lock_guard lock(tunables_mutex());
  return tunables_storage();
}

void set_poll_mode(bool poll, std::size_t threshold_kib) noexcept {
  const std::lock_guard lock(tunables_mutex());
  tunables_storage().poll_mode = poll;
  tunables_storage().poll_threshold_kib = threshold_kib;
}

void set_max_direct_io(std::size_t kib) noexcept {
  const std::lock_guard lock(tunables_mutex());
  tunables_storage().max_direct_io_kib = kib;
}

void set_max_cache(std::size_t kib) noexcept {
  const std::lock_guard lock(tunables_mutex());
  tunables_storage().max_cache_kib = kib;
}

void set_max_pinned(std::size_t kib) noexcept {
  const std::lock_guard lock(tunables_mutex());
  tunables_storage().max_pinned_kib = kib;
}

}  // namespace phx::cufile_shim
