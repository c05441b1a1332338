// SPDX-License-Identifier: MIT
#include <string>
#include <utility>

#include "core/device_state.hpp"
#include "phoenix/config.h"
#include "phoenix/phoenix.hpp"
#if PHX_WITH_CUDA
#include "cuda/gpu.hpp"
#endif

namespace phx {

int cuda_ordinal(int device_id) noexcept {
#if PHX_WITH_CUDA
  try {
    std::string why;
    const auto gpu = detail::cuda::gpu_for_device(device_id, why);
    return gpu ? gpu->ordinal : -1;
  } catch (...) {
    return -1;
  }
#else
  (void)device_id;
  return -1;
#endif
}

Device::Device(std::shared_ptr<detail::DeviceState> state) : state_(std::move(state)) {}
Device::Device(Device &&) noexcept = default;
Device &Device::operator=(Device &&) noexcept = default;
Device::~Device() = default;

Device Device::open(int device_id, Engine engine) {
  Options options = Options::defaults();
  if (engine != Engine::automatic) {
    options.engine = engine;
  }
  return Device(detail::DeviceState::open(device_id, options));
}

Device Device::open(int device_id, const Options &options) {
  return Device(detail::DeviceState::open(device_id, options));
}

int Device::id() const noexcept {
  return state_->id();
}
Engine Device::engine() const noexcept {
  return state_->engine();
}
EngineCapabilities Device::capabilities() const noexcept {
  return state_->capabilities();
}
const Options &Device::options() const noexcept {
  return state_->options();
}
const std::string &Device::engine_reason() const noexcept {
  return state_->reason();
}

Registration Device::register_memory(void *addr, std::size_t size) {
  auto mapping = state_->register_range(addr, size);
  return {state_, std::move(mapping)};
}

std::size_t Device::registration_count() const {
  return state_->table().size();
}

Registration::Registration(std::shared_ptr<detail::DeviceState> device,
                           std::shared_ptr<detail::Mapping> mapping)
    : device_(std::move(device)), mapping_(std::move(mapping)) {}

Registration::Registration(Registration &&other) noexcept
    : device_(std::move(other.device_)), mapping_(std::move(other.mapping_)) {}

Registration &Registration::operator=(Registration &&other) noexcept {
  if (this != &other) {
    release();
    device_ = std::move(other.device_);
    mapping_ = std::move(other.mapping_);
  }
  return *this;
}

Registration::~Registration() {
  release();
}

void Registration::release() noexcept {
  if (mapping_) {
    device_->forget(*mapping_);
    mapping_.reset();
  }
  device_.reset();
}

void *Registration::device_address() const noexcept {
  // Device addresses are kept as integers (they may not be host pointers).
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  return mapping_ ? reinterpret_cast<void *>(mapping_->device_address()) : nullptr;
}

std::byte *Registration::host_view() const noexcept {
  return mapping_ ? mapping_->host_view() : nullptr;
}

std::size_t Registration::size() const noexcept {
  return mapping_ ? mapping_->size() : 0;
}

std::span<std::byte> Registration::view() const noexcept {
  return {host_view(), size()};
}

}  // namespace phx
