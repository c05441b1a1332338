// SPDX-License-Identifier: MIT
#include <cerrno>

#include "engine_backend.hpp"
#include "error.hpp"

namespace phx::detail {
namespace {

class HostBackend final : public EngineBackend {
 public:
  [[nodiscard]] Engine kind() const noexcept override { return Engine::host; }

  [[nodiscard]] std::shared_ptr<Mapping> map(std::uintptr_t address, std::size_t size) override {
    // The host view is the memory itself; nothing to pin.
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    return std::make_shared<Mapping>(address, size, reinterpret_cast<std::byte *>(address));
  }
};

}  // namespace

std::unique_ptr<EngineBackend> make_host_backend() {
  return std::make_unique<HostBackend>();
}

}  // namespace phx::detail
