// SPDX-License-Identifier: MIT
#include "cuda/gpu.hpp"

#include <algorithm>
#include <cerrno>
#include <vector>

#include "core/error.hpp"

namespace phx::detail::cuda {
namespace {

std::vector<GpuIdentity> gpus_in_pci_order(const Driver &d) {
  int count = 0;
  if (d.DeviceGetCount(&count) != kSuccess) {
    return {};
  }
  std::vector<GpuIdentity> gpus;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    char bus[32] = {};
    if (d.DeviceGet(&device, ordinal) != kSuccess ||
        d.DeviceGetPCIBusId(bus, sizeof(bus), device) != kSuccess) {
      continue;
    }
    std::string id(bus);
    std::transform(id.begin(), id.end(), id.begin(), [](char c) {
      return static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
    });
    gpus.push_back({ordinal, id});
  }
  // Fixed-width hex "dddd:bb:dd.f" sorts as the bus order.
  std::sort(gpus.begin(), gpus.end(),
            [](const GpuIdentity &a, const GpuIdentity &b) { return a.pci_bus < b.pci_bus; });
  return gpus;
}

}  // namespace

int gpu_count() noexcept {
  const Driver *d = driver();
  int count = 0;
  if (d == nullptr || d->DeviceGetCount(&count) != kSuccess) {
    return 0;
  }
  return count;
}

std::optional<GpuIdentity> gpu_for_device(int device_id, std::string &why) {
  const Driver *d = driver();
  if (d == nullptr) {
    why = unavailable_reason();
    return std::nullopt;
  }
  const auto gpus = gpus_in_pci_order(*d);
  if (device_id < 0 || static_cast<std::size_t>(device_id) >= gpus.size()) {
    why = "no CUDA GPU for device " + std::to_string(device_id) + " (" +
          std::to_string(gpus.size()) + " visible)";
    return std::nullopt;
  }
  const GpuIdentity &gpu = gpus[static_cast<std::size_t>(device_id)];
  why = "CUDA GPU " + std::to_string(gpu.ordinal) + " at " + gpu.pci_bus;
  return gpu;
}

Gpu::Gpu(int device_id) : device_id_(device_id) {
  std::string why;
  auto gpu = gpu_for_device(device_id, why);
  if (!gpu) {
    throw_errno(ENODEV, "device " + std::to_string(device_id) + ": " + why);
  }
  identity_ = *gpu;
  const Driver &d = *driver();
  check(d.DeviceGet(&device_, identity_.ordinal), "cuDeviceGet");
  check(d.DevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
}

Gpu::~Gpu() {
  if (context_ != nullptr) {
    (void)driver()->DevicePrimaryCtxRelease(device_);
  }
}

void Gpu::make_current() const {
  check(driver()->CtxSetCurrent(context_), "cuCtxSetCurrent");
}

PointerInfo query_pointer(const Driver &d, std::uintptr_t address) noexcept {
  PointerInfo info;
  const auto ptr = static_cast<CUdeviceptr>(address);
  unsigned type = 0;
  if (d.PointerGetAttribute(&type, kPointerAttributeMemoryType, ptr) != kSuccess) {
    return info;  // not allocated or registered with CUDA (or freed)
  }
  info.cuda_known = true;
  info.memory_type = type;
  unsigned managed = 0;
  if (d.PointerGetAttribute(&managed, kPointerAttributeIsManaged, ptr) == kSuccess) {
    info.managed = managed != 0;
  }
  int ordinal = -1;
  if (d.PointerGetAttribute(&ordinal, kPointerAttributeDeviceOrdinal, ptr) == kSuccess) {
    info.ordinal = ordinal;
  }
  CUdeviceptr start = 0;
  std::size_t size = 0;
  if (d.PointerGetAttribute(&start, kPointerAttributeRangeStartAddr, ptr) == kSuccess &&
      d.PointerGetAttribute(&size, kPointerAttributeRangeSize, ptr) == kSuccess) {
    info.range_start = start;
    info.range_size = size;
  }
  info.buffer_id = buffer_id(d, address);
  return info;
}

unsigned long long buffer_id(const Driver &d, std::uintptr_t address) noexcept {  // NOLINT
  unsigned long long id = 0;  // NOLINT(google-runtime-int): the ABI's type
  if (d.PointerGetAttribute(&id, kPointerAttributeBufferId, static_cast<CUdeviceptr>(address)) !=
      kSuccess) {
    return 0;
  }
  return id;
}

}  // namespace phx::detail::cuda
