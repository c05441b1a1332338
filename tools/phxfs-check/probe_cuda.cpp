// SPDX-License-Identifier: MIT
// Whether a CUDA device is visible.  libcuda is opened at run time so that
// the tool runs (and says "no") on machines without NVIDIA's driver.
#include <dlfcn.h>
#include <link.h>

#include <array>
#include <cstdlib>
#include <string>

#include "probes.hpp"

namespace phxcheck {
namespace {

// The few driver API entry points we call, declared from NVIDIA's documented
// ABI (CUresult and CUdevice are int) so that no CUDA header is needed.
using CuResult = int;
using CuDevice = int;
using CuInitFn = CuResult (*)(unsigned int);
using CuDriverGetVersionFn = CuResult (*)(int *);
using CuDeviceGetCountFn = CuResult (*)(int *);
using CuDeviceGetFn = CuResult (*)(CuDevice *, int);
using CuDeviceGetNameFn = CuResult (*)(char *, int, CuDevice);
using CuDeviceGetPciBusIdFn = CuResult (*)(char *, int, CuDevice);
using CuDeviceTotalMemFn = CuResult (*)(std::size_t *, CuDevice);
using CuGetErrorNameFn = CuResult (*)(CuResult, const char **);

constexpr CuResult kCudaSuccess = 0;

template <typename Fn>
Fn symbol(void *library, const char *name) {
  // POSIX guarantees dlsym's result converts to a function pointer.
  return reinterpret_cast<Fn>(::dlsym(library, name));
}

class Driver {
 public:
  explicit Driver(void *library)
      : error_name_(symbol<CuGetErrorNameFn>(library, "cuGetErrorName")) {}

  // "CUDA_ERROR_NO_DEVICE (100)", or the number alone on drivers without
  // cuGetErrorName.
  [[nodiscard]] std::string describe(CuResult result) const {
    const char *name = nullptr;
    if (error_name_ != nullptr && error_name_(result, &name) == kCudaSuccess && name != nullptr) {
      return std::string(name) + " (" + std::to_string(result) + ")";
    }
    return "CUresult " + std::to_string(result);
  }

 private:
  CuGetErrorNameFn error_name_;
};

std::string loaded_path(void *library) {
  const link_map *map = nullptr;
  if (::dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
    return map->l_name;
  }
  return "libcuda.so.1";
}

void probe_devices(void *library, const Driver &driver, CudaInfo &info) {
  const auto get = symbol<CuDeviceGetFn>(library, "cuDeviceGet");
  const auto get_name = symbol<CuDeviceGetNameFn>(library, "cuDeviceGetName");
  const auto get_bus_id = symbol<CuDeviceGetPciBusIdFn>(library, "cuDeviceGetPCIBusId");
  const auto total_mem = symbol<CuDeviceTotalMemFn>(library, "cuDeviceTotalMem_v2");
  for (int i = 0; i < info.device_count.value_or(0); ++i) {
    CudaDevice device;
    device.index = i;
    CuDevice handle = 0;
    CuResult result = get != nullptr ? get(&handle, i) : -1;
    if (result != kCudaSuccess) {
      device.error = "cuDeviceGet: " + driver.describe(result);
      info.devices.push_back(std::move(device));
      continue;
    }
    std::array<char, 256> name{};
    result = get_name != nullptr ? get_name(name.data(), name.size(), handle) : -1;
    device.name =
        result == kCudaSuccess ? name.data() : "unknown (" + driver.describe(result) + ")";
    std::array<char, 64> bus_id{};
    result = get_bus_id != nullptr ? get_bus_id(bus_id.data(), bus_id.size(), handle) : -1;
    device.pci_bus_id =
        result == kCudaSuccess ? bus_id.data() : "unknown (" + driver.describe(result) + ")";
    std::size_t bytes = 0;
    if (total_mem != nullptr && total_mem(&bytes, handle) == kCudaSuccess) {
      device.memory_bytes = bytes;
    }
    info.devices.push_back(std::move(device));
  }
}

}  // namespace

CudaInfo probe_cuda() {
  CudaInfo info;
  // The tool is single-threaded: nothing else touches the environment.
  if (const char *visible = std::getenv("CUDA_VISIBLE_DEVICES")) {  // NOLINT(concurrency-mt-unsafe)
    info.visible_devices = visible;
  }
  void *library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char *why = ::dlerror();  // NOLINT(concurrency-mt-unsafe): single-threaded tool
    info.status = std::string("no (libcuda.so.1 not found: ") + (why ? why : "dlopen failed") + ")";
    return info;
  }
  // Never dlclose: unloading the driver library after cuInit is unsupported
  // and can hang at exit.
  info.library = loaded_path(library);
  const Driver driver(library);
  const auto init = symbol<CuInitFn>(library, "cuInit");
  const auto count = symbol<CuDeviceGetCountFn>(library, "cuDeviceGetCount");
  if (init == nullptr || count == nullptr) {
    info.status = "no (" + *info.library + " lacks cuInit or cuDeviceGetCount)";
    return info;
  }
  if (const auto version = symbol<CuDriverGetVersionFn>(library, "cuDriverGetVersion")) {
    int v = 0;
    if (version(&v) == kCudaSuccess) {
      info.driver_version = v;
    }
  }
  CuResult result = init(0);
  if (result != kCudaSuccess) {
    info.status = "no (cuInit: " + driver.describe(result) + ")";
    return info;
  }
  int n = 0;
  result = count(&n);
  if (result != kCudaSuccess) {
    info.status = "no (cuDeviceGetCount: " + driver.describe(result) + ")";
    return info;
  }
  info.device_count = n;
  probe_devices(library, driver, info);
  info.available = n > 0;
  info.status = n > 0 ? "yes (" + std::to_string(n) + (n == 1 ? " device)" : " devices)")
                      : "no (cuDeviceGetCount reports 0 devices)";
  return info;
}

}  // namespace phxcheck
