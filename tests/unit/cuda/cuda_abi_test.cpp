// SPDX-License-Identifier: MIT
// lib/cuda/driver_api.hpp declares the CUDA driver ABI itself (libphoenix
// loads libcuda at run time and never includes cuda.h); this test holds
// those declarations to the toolkit's cuda.h.  Runs without a GPU.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>

#include "cuda/driver_api.hpp"
#include "cuda/gpu.hpp"

namespace cu = phx::detail::cuda;

static_assert(cu::kSuccess == CUDA_SUCCESS);
static_assert(cu::kErrorInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(cu::kErrorNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(cu::kErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(cu::kPointerAttributeContext == CU_POINTER_ATTRIBUTE_CONTEXT);
static_assert(cu::kPointerAttributeMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(cu::kPointerAttributeSyncMemops == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS);
static_assert(cu::kPointerAttributeBufferId == CU_POINTER_ATTRIBUTE_BUFFER_ID);
static_assert(cu::kPointerAttributeIsManaged == CU_POINTER_ATTRIBUTE_IS_MANAGED);
static_assert(cu::kPointerAttributeDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(cu::kPointerAttributeRangeStartAddr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
static_assert(cu::kPointerAttributeRangeSize == CU_POINTER_ATTRIBUTE_RANGE_SIZE);
static_assert(cu::kMemoryTypeHost == CU_MEMORYTYPE_HOST);
static_assert(cu::kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(cu::kMemoryTypeUnified == CU_MEMORYTYPE_UNIFIED);
static_assert(cu::kMemHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(cu::kMemHostAllocDeviceMap == CU_MEMHOSTALLOC_DEVICEMAP);
static_assert(cu::kMemHostRegisterPortable == CU_MEMHOSTREGISTER_PORTABLE);
static_assert(cu::kEventBlockingSync == CU_EVENT_BLOCKING_SYNC);
static_assert(cu::kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(cu::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(cu::kStreamWaitValueGeq == CU_STREAM_WAIT_VALUE_GEQ);
static_assert(cu::kStreamWriteValueDefault == CU_STREAM_WRITE_VALUE_DEFAULT);
static_assert(cu::kStreamCaptureStatusNone == CU_STREAM_CAPTURE_STATUS_NONE);
static_assert(std::is_same_v<cu::CUdeviceptr, CUdeviceptr>);
static_assert(std::is_same_v<cu::CUstream, CUstream>);
static_assert(std::is_same_v<cu::CUcontext, CUcontext>);
static_assert(std::is_same_v<cu::CUevent, CUevent>);
static_assert(sizeof(cu::CUresult) == sizeof(CUresult));
static_assert(cu::kMemcpySrcAccessOrderStream == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM);
static_assert(sizeof(cu::MemLocation) == sizeof(CUmemLocation));
static_assert(offsetof(cu::MemLocation, id) == offsetof(CUmemLocation, id));
static_assert(sizeof(cu::MemcpyAttributes) == sizeof(CUmemcpyAttributes));
static_assert(offsetof(cu::MemcpyAttributes, src_access_order) ==
              offsetof(CUmemcpyAttributes, srcAccessOrder));
static_assert(offsetof(cu::MemcpyAttributes, src_location_hint) ==
              offsetof(CUmemcpyAttributes, srcLocHint));
static_assert(offsetof(cu::MemcpyAttributes, dst_location_hint) ==
              offsetof(CUmemcpyAttributes, dstLocHint));
static_assert(offsetof(cu::MemcpyAttributes, flags) == offsetof(CUmemcpyAttributes, flags));
// The entry points the table resolves by name, against their prototypes:
// the same parameters (our CUresult is an int where cuda.h has an enum).
template <class Ours, class Theirs>
struct SameParameters : std::false_type {};
template <class R1, class R2, class... A1, class... A2>
struct SameParameters<R1 (*)(A1...), R2 (*)(A2...)>
    : std::bool_constant<std::is_same_v<std::tuple<A1...>, std::tuple<A2...>> &&
                         sizeof(R1) == sizeof(R2)> {};
static_assert(SameParameters<decltype(cu::Driver::CtxGetCurrent), decltype(&cuCtxGetCurrent)>{});
static_assert(SameParameters<decltype(cu::Driver::EventQuery), decltype(&cuEventQuery)>{});
static_assert(
    SameParameters<decltype(cu::Driver::EventSynchronize), decltype(&cuEventSynchronize)>{});
static_assert(SameParameters<decltype(cu::Driver::MemHostAlloc), decltype(&cuMemHostAlloc)>{});
static_assert(
    SameParameters<decltype(cu::Driver::MemHostRegister), decltype(&cuMemHostRegister_v2)>{});
static_assert(
    SameParameters<decltype(cu::Driver::MemHostUnregister), decltype(&cuMemHostUnregister)>{});
// cuda.h's cuMemcpyBatchAsync is the _v2 symbol (no failIdx) in CUDA 13;
// Driver::MemcpyBatchAsync has this shape with our MemcpyAttributes,
// checked field by field above.
using TheirBatch = decltype(&cuMemcpyBatchAsync);
using OurBatch = CUresult (*)(CUdeviceptr *, CUdeviceptr *, std::size_t *, std::size_t,
                              CUmemcpyAttributes *, std::size_t *, std::size_t, CUstream);
static_assert(std::is_same_v<TheirBatch, OurBatch>);
static_assert(sizeof(cu::CUdevice) == sizeof(CUdevice));

TEST(CudaAbi, DriverLoadsOrSaysWhyNot) {
  if (cu::driver() == nullptr) {
    EXPECT_FALSE(cu::unavailable_reason().empty());
    EXPECT_EQ(cu::gpu_count(), 0);
    std::string why;
    EXPECT_FALSE(cu::gpu_for_device(0, why).has_value());
    EXPECT_FALSE(why.empty());
  } else {
    std::string why;
    const bool has = cu::gpu_for_device(0, why).has_value();
    EXPECT_EQ(has, cu::gpu_count() > 0) << why;
  }
}

TEST(CudaAbi, ErrorsMapToErrno) {
  EXPECT_EQ(cu::to_errno(CUDA_SUCCESS), 0);
  EXPECT_EQ(cu::to_errno(CUDA_ERROR_INVALID_VALUE), EFAULT);
  EXPECT_EQ(cu::to_errno(CUDA_ERROR_OUT_OF_MEMORY), ENOMEM);
  EXPECT_EQ(cu::to_errno(CUDA_ERROR_NO_DEVICE), ENODEV);
  EXPECT_EQ(cu::to_errno(CUDA_ERROR_NOT_SUPPORTED), ENOTSUP);
  EXPECT_NE(cu::error_text("cuTest", CUDA_ERROR_INVALID_VALUE).find("cuTest"), std::string::npos);
}
