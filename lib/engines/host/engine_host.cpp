// SPDX-License-Identifier: MIT
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include "core/error.hpp"
#include "engines/engine_backend.hpp"

namespace phx::detail {
namespace {

// True when every page of [address, address + size) is mapped in this
// process.  The staged I/O path copies into registered memory with memcpy,
// so a stray pointer (or a GPU pointer handed to the host engine) must be
// refused at registration, not found by a segfault later.
bool host_range_mapped(std::uintptr_t address, std::size_t size) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  constexpr std::size_t kWindowPages = 65536;  // mincore vector reused per window
  std::vector<unsigned char> residency(kWindowPages);
  std::uintptr_t cursor = address / page * page;
  const std::uintptr_t end = address + size;
  while (cursor < end) {
    const std::size_t window = std::min<std::uintptr_t>(end - cursor, kWindowPages * page);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): addresses arrive as integers
    if (::mincore(reinterpret_cast<void *>(cursor), window, residency.data()) != 0) {
      return false;  // ENOMEM: part of the range is not mapped
    }
    cursor += (window + page - 1) / page * page;
  }
  return true;
}

class HostBackend final : public EngineBackend {
 public:
  [[nodiscard]] Engine kind() const noexcept override { return Engine::host; }

  [[nodiscard]] std::shared_ptr<Mapping> map(std::uintptr_t address, std::size_t size) override {
    if (!host_range_mapped(address, size)) {
      char text[64] = {};
      (void)std::snprintf(text, sizeof(text), "%#lx + %zu", static_cast<unsigned long>(address),
                          size);
      throw_errno(EFAULT, std::string("range ") + text +
                              " is not mapped host memory; the host engine registers host "
                              "memory only (device memory needs the direct or compat engine)");
    }
    // The host view is the memory itself; nothing to pin.
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    return std::make_shared<Mapping>(address, size, reinterpret_cast<std::byte *>(address));
  }
};

}  // namespace

std::unique_ptr<EngineBackend> make_host_backend(int /*device_id*/, const Options & /*options*/) {
  return std::make_unique<HostBackend>();
}

}  // namespace phx::detail
