// SPDX-License-Identifier: MIT
#include "cuda_driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "common/timing.hpp"
#include "common/unavailable.hpp"

namespace phxcufile {
namespace {

template <typename Fn>
void bind(void *lib, const char *symbol, Fn &fn) {
  void *address = dlsym(lib, symbol);
  if (address == nullptr) {
    throw phxtools::Unavailable(std::string("the CUDA driver has no ") + symbol);
  }
  fn = reinterpret_cast<Fn>(address);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
}

std::uint64_t dptr(const void *ptr) noexcept {
  return reinterpret_cast<std::uintptr_t>(
      ptr);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
}

constexpr int kNoDevice = 100;       // CUDA_ERROR_NO_DEVICE
constexpr int kInvalidDevice = 101;  // CUDA_ERROR_INVALID_DEVICE
constexpr int kNotInitialized = 3;   // CUDA_ERROR_NOT_INITIALIZED
constexpr int kInsufficient = 35;    // CUDA_ERROR_INSUFFICIENT_DRIVER

}  // namespace

CudaDriver::CudaDriver(int ordinal) : ordinal_(ordinal) {
  // Read once, before any thread of the tool's or the library's starts.
  const char *name = std::getenv("PHX_CUDA_DRIVER");  // NOLINT(concurrency-mt-unsafe)
  const std::string library = name != nullptr && *name != '\0' ? name : "libcuda.so.1";
  lib_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    throw phxtools::Unavailable("no CUDA driver (" + library + " does not load)");
  }
  bind(lib_, "cuInit", init_);
  bind(lib_, "cuDeviceGet", device_get_);
  bind(lib_, "cuDevicePrimaryCtxRetain", retain_);
  bind(lib_, "cuDevicePrimaryCtxRelease_v2", release_);
  bind(lib_, "cuCtxSetCurrent", set_current_);
  bind(lib_, "cuMemAlloc_v2", alloc_);
  bind(lib_, "cuMemFree_v2", free_);
  bind(lib_, "cuMemcpyHtoD_v2", htod_);
  bind(lib_, "cuMemcpyDtoH_v2", dtoh_);
  bind(lib_, "cuGetErrorName", error_name_);
  Dl_info info{};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): dladdr takes the address
  path_ = dladdr(reinterpret_cast<void *>(init_), &info) != 0 && info.dli_fname != nullptr
              ? info.dli_fname
              : library;
  const auto started = phxtools::Clock::now();
  check(init_(0), "cuInit");
  int device = 0;
  check(device_get_(&device, ordinal), "cuDeviceGet(" + std::to_string(ordinal) + ")");
  check(retain_(&context_, device), "cuDevicePrimaryCtxRetain");
  check(set_current_(context_), "cuCtxSetCurrent");
  init_us_ = phxtools::us_since(started);
}

CudaDriver::~CudaDriver() {
  if (context_ != nullptr) {
    (void)release_(ordinal_);
  }
}

void CudaDriver::check(int result, const std::string &what) const {
  if (result == 0) {
    return;
  }
  const char *text = nullptr;
  if (error_name_ == nullptr || error_name_(result, &text) != 0 || text == nullptr) {
    text = "unknown error";
  }
  const std::string message = what + ": " + text + " (" + std::to_string(result) + ")";
  if (result == kNoDevice || result == kInvalidDevice || result == kNotInitialized ||
      result == kInsufficient) {
    throw phxtools::Unavailable(message);
  }
  throw std::runtime_error(message);
}

void *CudaDriver::alloc(std::size_t bytes) {
  std::uint64_t ptr = 0;
  check(alloc_(&ptr, bytes), "cuMemAlloc(" + std::to_string(bytes) + ")");
  // Device addresses are integers in the driver API.
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast,performance-no-int-to-ptr)
  return reinterpret_cast<void *>(ptr);
}

void CudaDriver::free(void *ptr) noexcept {
  if (ptr != nullptr) {
    (void)free_(dptr(ptr));
  }
}

void CudaDriver::to_device(void *dst, const void *src, std::size_t bytes) {
  check(htod_(dptr(dst), src, bytes), "cuMemcpyHtoD");
}

void CudaDriver::to_host(void *dst, const void *src, std::size_t bytes) {
  check(dtoh_(dst, dptr(src), bytes), "cuMemcpyDtoH");
}

}  // namespace phxcufile
