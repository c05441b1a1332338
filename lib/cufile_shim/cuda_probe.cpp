// SPDX-License-Identifier: MIT
#include "cufile_shim/cuda_probe.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace phx::cufile_shim {
namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;  // NOLINT(google-runtime-int): the ABI's type

// CUpointer_attribute and CUmemorytype values from the CUDA driver API reference.
constexpr int kAttrMemoryType = 2;
constexpr int kAttrBufferId = 7;
constexpr int kAttrIsManaged = 8;
constexpr int kAttrDeviceOrdinal = 9;
constexpr int kAttrRangeStart = 11;
constexpr int kAttrRangeSize = 12;
constexpr unsigned kMemoryTypeDevice = 2;

struct Driver {
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DeviceGetCount)(int *) = nullptr;
  CUresult (*DeviceGet)(int *, int) = nullptr;
  CUresult (*DeviceGetPCIBusId)(char *, int, int) = nullptr;
  CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr) = nullptr;
  std::vector<int> device_of_ordinal;  // CUDA ordinal -> Phoenix device id
  bool ok = false;
};

template <typename Fn>
bool resolve(void *lib, const char *name, Fn &fn) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));  // NOLINT: dlsym returns untyped addresses
  return fn != nullptr;
}

Driver load() {
  Driver d;
  const char *name = std::getenv("PHX_CUDA_DRIVER");  // NOLINT(concurrency-mt-unsafe): once
  void *lib = ::dlopen(name != nullptr ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr || !resolve(lib, "cuInit", d.Init) ||
      !resolve(lib, "cuDeviceGetCount", d.DeviceGetCount) ||
      !resolve(lib, "cuDeviceGet", d.DeviceGet) ||
      !resolve(lib, "cuDeviceGetPCIBusId", d.DeviceGetPCIBusId) ||
      !resolve(lib, "cuPointerGetAttribute", d.PointerGetAttribute) || d.Init(0) != 0) {
    return d;
  }
  int count = 0;
  if (d.DeviceGetCount(&count) != 0 || count <= 0) {
    return d;
  }
  // libphoenix's device ids: CUDA GPUs sorted by "dddd:bb:dd.f" (fixed-width
  // hex, so the string order is the bus order).
  std::vector<std::pair<std::string, int>> buses;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    int device = 0;
    char bus[32] = {};
    if (d.DeviceGet(&device, ordinal) != 0 ||
        d.DeviceGetPCIBusId(bus, static_cast<int>(sizeof(bus)), device) != 0) {
      return d;
    }
    std::string id(bus);
    std::transform(id.begin(), id.end(), id.begin(), [](char c) {
      return static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
    });
    buses.emplace_back(id, ordinal);
  }
  std::sort(buses.begin(), buses.end());
  d.device_of_ordinal.assign(static_cast<std::size_t>(count), -1);
  for (std::size_t i = 0; i < buses.size(); ++i) {
    d.device_of_ordinal[static_cast<std::size_t>(buses[i].second)] = static_cast<int>(i);
  }
  d.ok = true;
  return d;
}

const Driver &driver() noexcept {
  static const Driver d = [] {
    try {
      return load();
    } catch (...) {
      return Driver{};
    }
  }();
  return d;
}

}  // namespace

PointerInfo probe_pointer(const void *address) noexcept {
  PointerInfo info;
  const Driver &d = driver();
  if (!d.ok || d.PointerGetAttribute == nullptr || address == nullptr) {
    return info;
  }
  const auto p = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(address));
  unsigned type = 0;
  if (d.PointerGetAttribute(&type, kAttrMemoryType, p) != 0) {
    return info;  // memory CUDA does not know (plain host memory, a BAR)
  }
  info.known = true;
  unsigned managed = 0;
  (void)d.PointerGetAttribute(&managed, kAttrIsManaged, p);
  info.device_memory = type == kMemoryTypeDevice && managed == 0;
  int ordinal = -1;
  CUdeviceptr start = 0;
  std::size_t size = 0;
  if (d.PointerGetAttribute(&ordinal, kAttrDeviceOrdinal, p) != 0 ||
      d.PointerGetAttribute(&start, kAttrRangeStart, p) != 0 ||
      d.PointerGetAttribute(&size, kAttrRangeSize, p) != 0 ||
      d.PointerGetAttribute(&info.buffer_id, kAttrBufferId, p) != 0) {
    info.device_memory = false;
    return info;
  }
  if (ordinal >= 0 && static_cast<std::size_t>(ordinal) < d.device_of_ordinal.size()) {
    info.device_id = d.device_of_ordinal[static_cast<std::size_t>(ordinal)];
  }
  info.start = static_cast<std::uintptr_t>(start);
  info.size = size;
  return info;
}

}  // namespace phx::cufile_shim
