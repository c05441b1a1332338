// SPDX-License-Identifier: MIT
#include "engine_spec.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "engine_names.hpp"

namespace phxtools {
namespace {

constexpr std::array<EngineSpec, 4> kSpecs{{
    {"direct", phx::Engine::direct, true},
    {"compat", phx::Engine::compat, true},
    {"cufile", phx::Engine::cufile, true},
    {"host", phx::Engine::host, false},
}};

}  // namespace

std::span<const EngineSpec> libphoenix_engines() noexcept {
  return kSpecs;
}

const EngineSpec *find_libphoenix_engine(std::string_view name) {
  const std::string canonical = canonical_engine(name);
  for (const EngineSpec &spec : kSpecs) {
    if (canonical == spec.name) {
      return &spec;
    }
  }
  return nullptr;
}

phx::Device open_device(int device, phx::Engine engine) {
  try {
    return phx::Device::open(device, engine);
  } catch (const std::system_error &e) {
    const int err = e.code().value();
    if (err == ENODEV || err == ENOTSUP || err == EPROTO) {
      throw Unavailable(std::string(phx::to_string(engine)) + " engine: " + e.what());
    }
    throw;
  }
}

Memory::Memory(const EngineSpec &spec, int device, std::size_t bytes,
               std::optional<std::uint64_t> device_addr)
    : device_(device), size_(bytes) {
  if (device_addr) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): a device address is an integer by nature
    data_ = reinterpret_cast<void *>(static_cast<std::uintptr_t>(*device_addr));
  } else if (spec.gpu_memory) {
    gpu_ = std::make_unique<gpu::DeviceBuffer>(device, bytes);
    data_ = gpu_->data();
  } else {
    host_ = std::make_unique<HostBuffer>(bytes);
    data_ = host_->data();
  }
}

const char *Memory::kind() const noexcept {
  return gpu_ ? "gpu" : host_ ? "host" : "device-addr";
}

void Memory::copy_out(const phx::Registration *reg, std::size_t offset,
                      std::span<std::byte> out) const {
  if (offset > size_ || out.size() > size_ - offset) {
    throw std::out_of_range("Memory::copy_out: range outside the buffer");
  }
  if (gpu_) {
    gpu::copy_to_host(device_, out.data(), static_cast<const std::byte *>(data_) + offset,
                      out.size());
  } else if (host_) {
    std::memcpy(out.data(), host_->data() + offset, out.size());
  } else {
    // The range's place in the registration, which may start elsewhere.
    const auto *at = static_cast<const std::byte *>(data_) + offset;
    const auto *reg_start =
        reg != nullptr && *reg ? static_cast<const std::byte *>(reg->device_address()) : nullptr;
    if (reg_start == nullptr || at < reg_start ||
        static_cast<std::size_t>(at - reg_start) + out.size() > reg->size()) {
      throw std::logic_error("Memory::copy_out: device addresses need a registration of them");
    }
    std::memcpy(out.data(), reg->host_view() + (at - reg_start), out.size());
  }
}

std::optional<std::string> unavailable_reason(const EngineSpec &spec, int device, bool needs_gpu) {
  try {
    const phx::Device dev = phx::Device::open(device, spec.engine);
  } catch (const std::system_error &e) {
    return std::string(e.what());
  }
  if (spec.gpu_memory && needs_gpu) {
    const gpu::Probe probe = gpu::probe(device);
    if (!probe.usable) {
      return "needs GPU memory, but " + probe.reason;
    }
  }
  return std::nullopt;
}

}  // namespace phxtools
