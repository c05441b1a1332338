// SPDX-License-Identifier: MIT
#include "cuda/driver_api.hpp"

#include <dlfcn.h>

#include <cerrno>
#include <chrono>
#include <system_error>

#include "core/config.hpp"

namespace phx::detail::cuda {
namespace {

struct Loaded {
  Driver driver;
  bool ok = false;
  std::string reason;
};

template <typename Fn>
bool resolve(void *library, const char *symbol, Fn &fn, std::string &missing) {
  void *address = ::dlsym(library, symbol);
  if (address == nullptr) {
    missing = symbol;
    return false;
  }
  fn = reinterpret_cast<Fn>(address);  // NOLINT: dlsym returns untyped addresses
  return true;
}

Loaded load() {
  Loaded loaded;
  // PHX_CUDA_DRIVER names another libcuda (tests, unusual installs).
  const auto name = env_string("PHX_CUDA_DRIVER");
  const std::string library_name = name ? std::string(*name) : "libcuda.so.1";
  void *library = ::dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char *why = ::dlerror();  // NOLINT(concurrency-mt-unsafe): once, under static init
    loaded.reason = "no CUDA driver: cannot load " + library_name + " (" +
                    (why != nullptr ? why : "unknown") + ")";
    return loaded;
  }
  Driver &d = loaded.driver;
  std::string missing;
  const bool all =
      resolve(library, "cuInit", d.Init, missing) &&
      resolve(library, "cuDriverGetVersion", d.DriverGetVersion, missing) &&
      resolve(library, "cuGetErrorString", d.GetErrorString, missing) &&
      resolve(library, "cuGetErrorName", d.GetErrorName, missing) &&
      resolve(library, "cuDeviceGetCount", d.DeviceGetCount, missing) &&
      resolve(library, "cuDeviceGet", d.DeviceGet, missing) &&
      resolve(library, "cuDeviceGetPCIBusId", d.DeviceGetPCIBusId, missing) &&
      resolve(library, "cuDevicePrimaryCtxRetain", d.DevicePrimaryCtxRetain, missing) &&
      resolve(library, "cuDevicePrimaryCtxRelease_v2", d.DevicePrimaryCtxRelease, missing) &&
      resolve(library, "cuCtxPushCurrent_v2", d.CtxPushCurrent, missing) &&
      resolve(library, "cuCtxPopCurrent_v2", d.CtxPopCurrent, missing) &&
      resolve(library, "cuCtxSetCurrent", d.CtxSetCurrent, missing) &&
      resolve(library, "cuCtxGetCurrent", d.CtxGetCurrent, missing) &&
      resolve(library, "cuPointerGetAttribute", d.PointerGetAttribute, missing) &&
      resolve(library, "cuPointerSetAttribute", d.PointerSetAttribute, missing) &&
      resolve(library, "cuMemHostAlloc", d.MemHostAlloc, missing) &&
      resolve(library, "cuMemFreeHost", d.MemFreeHost, missing) &&
      resolve(library, "cuMemHostRegister_v2", d.MemHostRegister, missing) &&
      resolve(library, "cuMemHostUnregister", d.MemHostUnregister, missing) &&
      resolve(library, "cuMemHostGetDevicePointer_v2", d.MemHostGetDevicePointer, missing) &&
      resolve(library, "cuStreamCreate", d.StreamCreate, missing) &&
      resolve(library, "cuStreamDestroy_v2", d.StreamDestroy, missing) &&
      resolve(library, "cuStreamSynchronize", d.StreamSynchronize, missing) &&
      resolve(library, "cuStreamGetCtx", d.StreamGetCtx, missing) &&
      resolve(library, "cuStreamIsCapturing", d.StreamIsCapturing, missing) &&
      resolve(library, "cuStreamWaitValue32_v2", d.StreamWaitValue32, missing) &&
      resolve(library, "cuStreamWriteValue32_v2", d.StreamWriteValue32, missing) &&
      resolve(library, "cuLaunchHostFunc", d.LaunchHostFunc, missing) &&
      resolve(library, "cuEventCreate", d.EventCreate, missing) &&
      resolve(library, "cuEventDestroy_v2", d.EventDestroy, missing) &&
      resolve(library, "cuEventRecord", d.EventRecord, missing) &&
      resolve(library, "cuEventSynchronize", d.EventSynchronize, missing) &&
      resolve(library, "cuEventQuery", d.EventQuery, missing) &&
      resolve(library, "cuMemcpyHtoDAsync_v2", d.MemcpyHtoDAsync, missing) &&
      resolve(library, "cuMemcpyDtoHAsync_v2", d.MemcpyDtoHAsync, missing);
  // Optional entry points: missing ones stay null.
  d.MemcpyBatchAsync = reinterpret_cast<decltype(d.MemcpyBatchAsync)>(  // NOLINT: dlsym's address
      ::dlsym(library, "cuMemcpyBatchAsync_v2"));
  if (!all) {
    loaded.reason = "CUDA driver " + library_name + " lacks " + missing + " (driver too old)";
    return loaded;  // the library stays loaded: harmless, and it may be in use elsewhere
  }
  if (const CUresult r = d.Init(0); r != kSuccess) {
    const char *text = nullptr;
    (void)d.GetErrorName(r, &text);
    loaded.reason = std::string("CUDA driver present but cuInit failed: ") +
                    (text != nullptr ? text : std::to_string(r).c_str());
    return loaded;
  }
  loaded.ok = true;
  return loaded;
}

const Loaded &loaded() noexcept {
  static const Loaded instance = [] {
    try {
      return load();
    } catch (...) {
      Loaded failed;
      return failed;
    }
  }();
  return instance;
}

}  // namespace

const Driver *driver() noexcept {
  const Loaded &l = loaded();
  return l.ok ? &l.driver : nullptr;
}

const std::string &unavailable_reason() noexcept {
  return loaded().reason;
}

std::string error_text(const char *call, CUresult result) {
  const Driver *d = driver();
  const char *name = nullptr;
  const char *text = nullptr;
  if (d != nullptr) {
    (void)d->GetErrorName(result, &name);
    (void)d->GetErrorString(result, &text);
  }
  std::string out = std::string(call) + ": ";
  out += name != nullptr ? name : "CUDA error " + std::to_string(result);
  if (text != nullptr) {
    out += std::string(" (") + text + ")";
  }
  return out;
}

int to_errno(CUresult result) noexcept {
  switch (result) {
    case kSuccess:
      return 0;
    case kErrorInvalidValue:
      return EFAULT;  // nearly always a bad pointer or range here
    case 2:           // CUDA_ERROR_OUT_OF_MEMORY
      return ENOMEM;
    case kErrorNoDevice:
    case 101:  // CUDA_ERROR_INVALID_DEVICE
      return ENODEV;
    case 801:  // CUDA_ERROR_NOT_SUPPORTED
      return ENOTSUP;
    default:
      return EIO;
  }
}

void check(CUresult result, const char *call) {
  if (result != kSuccess) {
    throw std::system_error(to_errno(result), std::system_category(), error_text(call, result));
  }
}

CUresult wait_event(CUevent event, unsigned spin_us) noexcept {
  const Driver *d = driver();
  if (d == nullptr) {
    return kErrorNoDevice;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  do {
    const CUresult r = d->EventQuery(event);
    if (r != kErrorNotReady) {
      return r;
    }
  } while (std::chrono::steady_clock::now() < until);
  return d->EventSynchronize(event);
}

CUcontext any_context() {
  const Driver *d = driver();
  if (d == nullptr) {
    throw std::system_error(ENODEV, std::system_category(), unavailable_reason());
  }
  CUcontext current = nullptr;
  if (d->CtxGetCurrent(&current) == kSuccess && current != nullptr) {
    return current;
  }
  // Never released: memory allocated in it may live until exit.
  static CUcontext fallback = [d] {
    CUdevice device = 0;
    check(d->DeviceGet(&device, 0), "cuDeviceGet(0)");
    CUcontext context = nullptr;
    check(d->DevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain(0)");
    return context;
  }();
  return fallback;
}

ScopedContext::ScopedContext(CUcontext context) {
  const Driver *d = driver();
  if (d != nullptr && context != nullptr) {
    check(d->CtxPushCurrent(context), "cuCtxPushCurrent");
    pushed_ = true;
  }
}

ScopedContext::~ScopedContext() {
  if (pushed_) {
    CUcontext previous = nullptr;
    (void)driver()->CtxPopCurrent(&previous);
  }
}

}  // namespace phx::detail::cuda
