// SPDX-License-Identifier: MIT
// The few CUDA driver API types and entry points libphoenix uses, declared
// here from NVIDIA's documented ABI and resolved at run time with dlopen of
// libcuda.so.1.  Nothing links against CUDA: a machine without the driver
// (CI, containers without a GPU) loads libphoenix and simply has no GPUs.
// tests/unit/cuda/cuda_abi_test.cpp checks every value against the toolkit's cuda.h.
#ifndef PHOENIX_LIB_CUDA_DRIVER_API_HPP
#define PHOENIX_LIB_CUDA_DRIVER_API_HPP

#include <cstddef>
#include <cstdint>
#include <string>

// Opaque handle types, named as cuda.h names them so that a user's
// cudaStream_t (struct CUstream_st *) is our CUstream.
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;

namespace phx::detail::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT(google-runtime-int): the ABI's type
using CUcontext = CUctx_st *;
using CUstream = CUstream_st *;
using CUevent = CUevent_st *;
using CUhostFn = void (*)(void *);

inline constexpr CUresult kSuccess = 0;              // CUDA_SUCCESS
inline constexpr CUresult kErrorInvalidValue = 1;    // CUDA_ERROR_INVALID_VALUE
inline constexpr CUresult kErrorNoDevice = 100;      // CUDA_ERROR_NO_DEVICE
inline constexpr CUresult kErrorNotReady = 600;      // CUDA_ERROR_NOT_READY
inline constexpr CUresult kErrorNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED

// CUpointer_attribute
inline constexpr int kPointerAttributeContext = 1;
inline constexpr int kPointerAttributeMemoryType = 2;
inline constexpr int kPointerAttributeSyncMemops = 6;
inline constexpr int kPointerAttributeBufferId = 7;
inline constexpr int kPointerAttributeIsManaged = 8;
inline constexpr int kPointerAttributeDeviceOrdinal = 9;
inline constexpr int kPointerAttributeRangeStartAddr = 11;
inline constexpr int kPointerAttributeRangeSize = 12;

// CUmemorytype
inline constexpr unsigned kMemoryTypeHost = 1;
inline constexpr unsigned kMemoryTypeDevice = 2;
inline constexpr unsigned kMemoryTypeUnified = 4;

inline constexpr unsigned kMemHostAllocPortable = 0x1;     // CU_MEMHOSTALLOC_PORTABLE
inline constexpr unsigned kMemHostAllocDeviceMap = 0x2;    // CU_MEMHOSTALLOC_DEVICEMAP
inline constexpr unsigned kMemHostRegisterPortable = 0x1;  // CU_MEMHOSTREGISTER_PORTABLE
inline constexpr unsigned kEventBlockingSync = 0x1;        // CU_EVENT_BLOCKING_SYNC
inline constexpr unsigned kEventDisableTiming = 0x2;       // CU_EVENT_DISABLE_TIMING
inline constexpr unsigned kStreamNonBlocking = 0x1;        // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kStreamWaitValueGeq = 0x0;       // CU_STREAM_WAIT_VALUE_GEQ
inline constexpr unsigned kStreamWriteValueDefault = 0x0;  // CU_STREAM_WRITE_VALUE_DEFAULT
inline constexpr int kStreamCaptureStatusNone = 0;         // CU_STREAM_CAPTURE_STATUS_NONE
inline constexpr int kMemcpySrcAccessOrderStream = 1;      // CU_MEMCPY_SRC_ACCESS_ORDER_STREAM

/// CUmemLocation: a location hint, unused here (zero: no hint).
struct MemLocation {
  int type = 0;
  int id = 0;
};

/// CUmemcpyAttributes, for cuMemcpyBatchAsync.
struct MemcpyAttributes {
  int src_access_order = kMemcpySrcAccessOrderStream;
  MemLocation src_location_hint;
  MemLocation dst_location_hint;
  unsigned flags = 0;
};

/// Entry points, resolved once.  Names in comments are the exported symbols.
struct Driver {
  CUresult (*Init)(unsigned) = nullptr;                            // cuInit
  CUresult (*DriverGetVersion)(int *) = nullptr;                   // cuDriverGetVersion
  CUresult (*GetErrorString)(CUresult, const char **) = nullptr;   // cuGetErrorString
  CUresult (*GetErrorName)(CUresult, const char **) = nullptr;     // cuGetErrorName
  CUresult (*DeviceGetCount)(int *) = nullptr;                     // cuDeviceGetCount
  CUresult (*DeviceGet)(CUdevice *, int) = nullptr;                // cuDeviceGet
  CUresult (*DeviceGetPCIBusId)(char *, int, CUdevice) = nullptr;  // cuDeviceGetPCIBusId
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice) = nullptr;
  CUresult (*DevicePrimaryCtxRelease)(CUdevice) = nullptr;  // ..._v2
  CUresult (*CtxPushCurrent)(CUcontext) = nullptr;          // cuCtxPushCurrent_v2
  CUresult (*CtxPopCurrent)(CUcontext *) = nullptr;         // cuCtxPopCurrent_v2
  CUresult (*CtxSetCurrent)(CUcontext) = nullptr;           // cuCtxSetCurrent
  CUresult (*CtxGetCurrent)(CUcontext *) = nullptr;         // cuCtxGetCurrent
  CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr) = nullptr;
  CUresult (*PointerSetAttribute)(const void *, int, CUdeviceptr) = nullptr;
  CUresult (*MemHostAlloc)(void **, std::size_t, unsigned) = nullptr;    // cuMemHostAlloc
  CUresult (*MemFreeHost)(void *) = nullptr;                             // cuMemFreeHost
  CUresult (*MemHostRegister)(void *, std::size_t, unsigned) = nullptr;  // cuMemHostRegister_v2
  CUresult (*MemHostUnregister)(void *) = nullptr;                       // cuMemHostUnregister
  CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned) = nullptr;  // _v2
  CUresult (*StreamCreate)(CUstream *, unsigned) = nullptr;                        // cuStreamCreate
  CUresult (*StreamDestroy)(CUstream) = nullptr;              // cuStreamDestroy_v2
  CUresult (*StreamSynchronize)(CUstream) = nullptr;          // cuStreamSynchronize
  CUresult (*StreamGetCtx)(CUstream, CUcontext *) = nullptr;  // cuStreamGetCtx
  CUresult (*StreamIsCapturing)(CUstream, int *) = nullptr;   // cuStreamIsCapturing
  CUresult (*StreamWaitValue32)(CUstream, CUdeviceptr, std::uint32_t, unsigned) = nullptr;   // _v2
  CUresult (*StreamWriteValue32)(CUstream, CUdeviceptr, std::uint32_t, unsigned) = nullptr;  // _v2
  CUresult (*LaunchHostFunc)(CUstream, CUhostFn, void *) = nullptr;  // cuLaunchHostFunc
  CUresult (*EventCreate)(CUevent *, unsigned) = nullptr;            // cuEventCreate
  CUresult (*EventDestroy)(CUevent) = nullptr;                       // cuEventDestroy_v2
  CUresult (*EventRecord)(CUevent, CUstream) = nullptr;              // cuEventRecord
  CUresult (*EventSynchronize)(CUevent) = nullptr;                   // cuEventSynchronize
  CUresult (*EventQuery)(CUevent) = nullptr;                         // cuEventQuery
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, std::size_t, CUstream) = nullptr;  // _v2
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, std::size_t, CUstream) = nullptr;        // _v2
  // Optional (null before CUDA 13's driver): cuMemcpyBatchAsync_v2, many
  // copies for the CPU cost of about one.
  CUresult (*MemcpyBatchAsync)(CUdeviceptr *, CUdeviceptr *, std::size_t *, std::size_t,
                               MemcpyAttributes *, std::size_t *, std::size_t, CUstream) = nullptr;
};

/// The driver, loaded and initialised on first use; null when libcuda.so.1
/// is absent or cuInit fails (then unavailable_reason() says why).
[[nodiscard]] const Driver *driver() noexcept;
[[nodiscard]] const std::string &unavailable_reason() noexcept;

/// "cuMemcpyHtoDAsync: CUDA_ERROR_INVALID_VALUE (invalid argument)".
[[nodiscard]] std::string error_text(const char *call, CUresult result);

/// errno closest to a driver error (EFAULT for bad addresses, ENOMEM, EIO...).
[[nodiscard]] int to_errno(CUresult result) noexcept;

/// Throws std::system_error(to_errno) with error_text unless @p result is success.
void check(CUresult result, const char *call);

/// A context for calls that need one but belong to no GPU (pinned host
/// allocations of the host engine): the calling thread's current context,
/// else CUDA device 0's primary context, retained once for the life of the
/// process (portable pinned memory outlives no context it was made in).
/// Throws std::system_error when there is no GPU.
[[nodiscard]] CUcontext any_context();

/// Waits for @p event: polls it for up to @p spin_us microseconds, then
/// blocks in cuEventSynchronize.  Events made with kEventBlockingSync
/// sleep until the GPU's interrupt wakes the thread, tens of microseconds
/// after a small copy is done; polling first keeps that off every small
/// transfer while a long copy still leaves the core idle.
[[nodiscard]] CUresult wait_event(CUevent event, unsigned spin_us = 200) noexcept;

/// Makes a context current for a scope and restores the previous one.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext context);
  ~ScopedContext();
  ScopedContext(const ScopedContext &) = delete;
  ScopedContext &operator=(const ScopedContext &) = delete;
  ScopedContext(ScopedContext &&) = delete;
  ScopedContext &operator=(ScopedContext &&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace phx::detail::cuda

#endif  // PHOENIX_LIB_CUDA_DRIVER_API_HPP
