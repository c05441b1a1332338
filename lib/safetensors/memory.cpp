// SPDX-License-Identifier: MIT
// Destination memory the loader allocates: aligned host memory for the host
// engine, pinned host memory on request, device memory (cuMemAlloc in the
// GPU's primary context, the one the CUDA runtime and torch use) otherwise.
#include <dlfcn.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "phoenix/config.h"
#include "phoenix/safetensors.hpp"

#if PHX_WITH_CUDA
#include "core/config.hpp"
#include "cuda/driver_api.hpp"
#include "cuda/gpu.hpp"
#include "engines/compat/staging_pool.hpp"
#endif

namespace phx::safetensors {

Allocation::~Allocation() = default;

namespace {

class HostAllocation final : public Allocation {
 public:
  HostAllocation(std::byte *data, std::size_t size) noexcept : Allocation(data, size) {}
  ~HostAllocation() override { std::free(data()); }  // NOLINT: pairs with aligned_alloc
  HostAllocation(const HostAllocation &) = delete;
  HostAllocation &operator=(const HostAllocation &) = delete;
  HostAllocation(HostAllocation &&) = delete;
  HostAllocation &operator=(HostAllocation &&) = delete;
};

// The tensor's size, once it is known to fit @p dst.  Throws EINVAL.
std::size_t checked_size(const LoadedTensor &tensor, std::span<const std::byte> dst) {
  const std::size_t size = tensor.info->size();
  if (dst.size() < size) {
    detail::throw_errno(EINVAL, "tensor \"" + tensor.info->name + "\": " + std::to_string(size) +
                                    " bytes do not fit a buffer of " + std::to_string(dst.size()));
  }
  return size;
}

#if PHX_WITH_CUDA

namespace cuda = detail::cuda;

// cuMemAlloc/cuMemFree are the loader's alone, so they are resolved here
// from the driver library lib/cuda/driver_api already loaded.
struct MemoryCalls {
  cuda::CUresult (*alloc)(cuda::CUdeviceptr *, std::size_t) = nullptr;       // cuMemAlloc_v2
  cuda::CUresult (*free)(cuda::CUdeviceptr) = nullptr;                       // cuMemFree_v2
  cuda::CUresult (*copy)(void *, cuda::CUdeviceptr, std::size_t) = nullptr;  // cuMemcpyDtoH_v2
  std::string error;
};

const MemoryCalls &memory_calls() {
  static const MemoryCalls calls = [] {
    MemoryCalls c;
    if (cuda::driver() == nullptr) {
      c.error = cuda::unavailable_reason();
      return c;
    }
    const auto name = detail::env_string("PHX_CUDA_DRIVER");
    const std::string library_name = name ? std::string(*name) : "libcuda.so.1";
    void *library = ::dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (library == nullptr) {
      c.error = "cannot find the loaded " + library_name;
      return c;
    }
    // NOLINTBEGIN(cppcoreguidelines-pro-type-reinterpret-cast): dlsym is untyped
    c.alloc = reinterpret_cast<decltype(c.alloc)>(::dlsym(library, "cuMemAlloc_v2"));
    c.free = reinterpret_cast<decltype(c.free)>(::dlsym(library, "cuMemFree_v2"));
    c.copy = reinterpret_cast<decltype(c.copy)>(::dlsym(library, "cuMemcpyDtoH_v2"));
    // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)
    if (c.alloc == nullptr || c.free == nullptr || c.copy == nullptr) {
      c.error = library_name + " lacks cuMemAlloc_v2, cuMemFree_v2 or cuMemcpyDtoH_v2";
    }
    return c;
  }();
  return calls;
}

const MemoryCalls &usable_memory_calls() {
  const MemoryCalls &calls = memory_calls();
  if (!calls.error.empty()) {
    detail::throw_errno(ENODEV, "CUDA memory: " + calls.error);
  }
  return calls;
}

class CudaAllocation final : public Allocation {
 public:
  CudaAllocation(std::shared_ptr<const cuda::Gpu> gpu, std::byte *data, std::size_t size) noexcept
      : Allocation(data, size), gpu_(std::move(gpu)) {}
  ~CudaAllocation() override {
    try {
      const cuda::ScopedContext scope(gpu_->context());
      (void)memory_calls().free(reinterpret_cast<cuda::CUdeviceptr>(data()));
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report
    }
  }
  CudaAllocation(const CudaAllocation &) = delete;
  CudaAllocation &operator=(const CudaAllocation &) = delete;
  CudaAllocation(CudaAllocation &&) = delete;
  CudaAllocation &operator=(CudaAllocation &&) = delete;

 private:
  std::shared_ptr<const cuda::Gpu> gpu_;
};

class PinnedAllocation final : public Allocation {
 public:
  explicit PinnedAllocation(detail::PinnedBuffer buffer) noexcept
      : Allocation(buffer.data(), buffer.size()), buffer_(std::move(buffer)) {}
  ~PinnedAllocation() override = default;
  PinnedAllocation(const PinnedAllocation &) = delete;
  PinnedAllocation &operator=(const PinnedAllocation &) = delete;
  PinnedAllocation(PinnedAllocation &&) = delete;
  PinnedAllocation &operator=(PinnedAllocation &&) = delete;

 private:
  detail::PinnedBuffer buffer_;
};

#endif  // PHX_WITH_CUDA

}  // namespace

std::shared_ptr<Allocation> allocate_host(std::size_t bytes, std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || bytes == 0) {
    detail::throw_errno(EINVAL, "host allocation of " + std::to_string(bytes) +
                                    " bytes aligned to " + std::to_string(alignment));
  }
  const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void *data = std::aligned_alloc(alignment, rounded);  // NOLINT: freed by HostAllocation
  if (data == nullptr) {
    detail::throw_errno(ENOMEM, "host allocation of " + std::to_string(bytes) + " bytes");
  }
  return std::make_shared<HostAllocation>(static_cast<std::byte *>(data), bytes);
}

#if PHX_WITH_CUDA

namespace cuda = detail::cuda;

std::shared_ptr<Allocation> allocate_cuda(int device, std::size_t bytes) {
  const MemoryCalls &calls = usable_memory_calls();
  auto gpu = std::make_shared<const cuda::Gpu>(device);
  const cuda::ScopedContext scope(gpu->context());
  cuda::CUdeviceptr address = 0;
  const cuda::CUresult result = calls.alloc(&address, bytes);
  if (result != cuda::kSuccess) {
    detail::throw_errno(cuda::to_errno(result),
                        "device " + std::to_string(device) + ": allocating " +
                            std::to_string(bytes) +
                            " bytes: " + cuda::error_text("cuMemAlloc", result));
  }
  // NOLINTNEXTLINE(performance-no-int-to-ptr): CUDA device addresses are integers
  auto *data = reinterpret_cast<std::byte *>(address);
  return std::make_shared<CudaAllocation>(std::move(gpu), data, bytes);
}

std::shared_ptr<Allocation> allocate_pinned(std::size_t bytes) {
  return std::make_shared<PinnedAllocation>(detail::PinnedBuffer(bytes));
}

void copy_to_host(const LoadedTensor &tensor, std::span<std::byte> dst) {
  const std::size_t size = checked_size(tensor, dst);
  if (size == 0) {  // an empty span's data() may be null: nothing to copy
    return;
  }
  if (tensor.memory == MemoryKind::host) {
    std::memcpy(dst.data(), tensor.data, size);
    return;
  }
  const MemoryCalls &calls = usable_memory_calls();
  const cuda::Gpu gpu(tensor.device);
  const cuda::ScopedContext scope(gpu.context());
  const cuda::CUresult result =
      calls.copy(dst.data(), reinterpret_cast<cuda::CUdeviceptr>(tensor.data), size);
  if (result != cuda::kSuccess) {
    detail::throw_errno(cuda::to_errno(result), "tensor \"" + tensor.info->name + "\": " +
                                                    cuda::error_text("cuMemcpyDtoH", result));
  }
}

#else

std::shared_ptr<Allocation> allocate_cuda(int device, std::size_t bytes) {
  detail::throw_errno(ENOTSUP, "device " + std::to_string(device) + ": allocating " +
                                   std::to_string(bytes) +
                                   " bytes of GPU memory: libphoenix was built without CUDA");
}

std::shared_ptr<Allocation> allocate_pinned(std::size_t bytes) {
  detail::throw_errno(ENOTSUP, "pinned allocation of " + std::to_string(bytes) +
                                   " bytes: libphoenix was built without CUDA");
}

void copy_to_host(const LoadedTensor &tensor, std::span<std::byte> dst) {
  const std::size_t size = checked_size(tensor, dst);
  if (tensor.memory != MemoryKind::host) {
    detail::throw_errno(ENOTSUP, "tensor \"" + tensor.info->name +
                                     "\" is in GPU memory and libphoenix was built without CUDA");
  }
  std::memcpy(dst.data(), tensor.data, size);
}

#endif  // PHX_WITH_CUDA

int cuda_ordinal(int device) noexcept {
  return phx::cuda_ordinal(device);
}

}  // namespace phx::safetensors
