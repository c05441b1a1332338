// SPDX-License-Identifier: MIT
// The compat engine: a GPU without the phxfs module.  Registration checks
// that the range is device memory of this device's GPU; I/O goes through
// pinned staging buffers and cuMemcpyAsync (CopyPool).
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <system_error>

#include "core/error.hpp"
#include "cuda/gpu.hpp"
#include "engines/compat/compat_mapping.hpp"
#include "engines/compat/copy_pool.hpp"
#include "engines/engine_backend.hpp"

namespace phx::detail {
namespace {

std::string hex(std::uintptr_t address) {
  char text[32] = {};
  (void)std::snprintf(text, sizeof(text), "%#lx", static_cast<unsigned long>(address));
  return text;
}

class CompatBackend final : public EngineBackend {
 public:
  CompatBackend(int device_id, CopyPoolConfig config)
      : gpu_(std::make_shared<const cuda::Gpu>(device_id)), config_(config) {}

  [[nodiscard]] Engine kind() const noexcept override { return Engine::compat; }

  [[nodiscard]] std::shared_ptr<Mapping> map(std::uintptr_t address, std::size_t size) override {
    const cuda::Driver &d = *cuda::driver();
    const cuda::ScopedContext scope(gpu_->context());
    const std::string what = "range " + hex(address) + " + " + std::to_string(size);
    const std::string gpu_name =
        "GPU " + std::to_string(gpu_->identity().ordinal) + " (" + gpu_->identity().pci_bus + ")";
    const cuda::PointerInfo info = cuda::query_pointer(d, address);
    if (!info.cuda_known) {
      throw_errno(EFAULT, what +
                              " is not CUDA memory (never allocated with CUDA, or already "
                              "freed); the compat engine registers device memory of " +
                              gpu_name);
    }
    if (info.managed || info.memory_type != cuda::kMemoryTypeDevice) {
      throw_errno(EFAULT, what + " is " +
                              (info.managed ? std::string("managed (unified) memory")
                                            : std::string("host memory known to CUDA")) +
                              ", not device memory of " + gpu_name +
                              "; register host memory on a device opened with the host engine");
    }
    if (info.ordinal != gpu_->identity().ordinal) {
      throw_errno(EINVAL, what + " is memory of CUDA GPU " + std::to_string(info.ordinal) +
                              ", but device " + std::to_string(gpu_->device_id()) + " is " +
                              gpu_name);
    }
    if (info.range_size != 0 &&
        (address < info.range_start || address - info.range_start > info.range_size ||
         size > info.range_size - (address - info.range_start))) {
      throw_errno(EFAULT, what + " runs past the end of its CUDA allocation (" +
                              hex(static_cast<std::uintptr_t>(info.range_start)) + " + " +
                              std::to_string(info.range_size) + ")");
    }
    // Synchronous cudaMemcpy on this range then waits for our copies too.
    const unsigned one = 1;
    cuda::check(d.PointerSetAttribute(&one, cuda::kPointerAttributeSyncMemops,
                                      static_cast<cuda::CUdeviceptr>(address)),
                "cuPointerSetAttribute(SYNC_MEMOPS)");
    return std::make_shared<CompatMapping>(address, size, info.buffer_id);
  }

  [[nodiscard]] TransferResult transfer(Direction dir, int fd, const Mapping &mapping,
                                        std::size_t mapping_offset, std::size_t size,
                                        std::uint64_t file_offset,
                                        const IoPolicy &policy) noexcept override {
    // A registration outliving its cudaFree must fail clearly, not copy
    // into whatever was allocated there since (or fault): one driver call.
    try {
      const cuda::ScopedContext scope(gpu_->context());
      if (std::string lost = mapping.lost(); !lost.empty()) {
        TransferResult failed;
        failed.error = EFAULT;
        failed.detail = std::move(lost);
        return failed;
      }
    } catch (const std::system_error &e) {  // making the context current failed
      TransferResult failed;
      failed.error = e.code().value();
      try {
        failed.detail = e.what();
      } catch (...) {  // NOLINT(bugprone-empty-catch): the errno alone then
      }
      return failed;
    } catch (...) {  // the message's string
      TransferResult failed;
      failed.error = ENOMEM;
      return failed;
    }
    CopyPool *pool = copy_pool();
    if (pool == nullptr) {
      TransferResult failed;
      failed.error = pool_error_;
      failed.detail = pool_error_text_;
      return failed;
    }
    return pool->run(dir, fd, mapping.device_address() + mapping_offset, size, file_offset, policy);
  }

 private:
  // Threads and pinned memory only once the device does I/O.
  CopyPool *copy_pool() noexcept {
    std::call_once(pool_once_, [this] {
      try {
        pool_ = std::make_unique<CopyPool>(gpu_, config_);
      } catch (const std::system_error &e) {
        pool_error_ = e.code().value();
        pool_error_text_ = e.what();
      } catch (...) {
        pool_error_ = ENOMEM;
        pool_error_text_ = "starting the copy threads";
      }
    });
    return pool_.get();
  }

  std::shared_ptr<const cuda::Gpu> gpu_;
  CopyPoolConfig config_;
  std::once_flag pool_once_;
  std::unique_ptr<CopyPool> pool_;
  int pool_error_ = 0;
  std::string pool_error_text_;
};

}  // namespace

std::string CompatMapping::lost() const {
  const cuda::Driver *d = cuda::driver();
  if (d == nullptr || cuda::buffer_id(*d, device_address()) == buffer_id()) {
    return {};
  }
  return "registered range " + hex(device_address()) + " + " + std::to_string(size()) +
         " is no longer the CUDA allocation it was registered in (freed while registered?)";
}

std::unique_ptr<EngineBackend> make_compat_backend(int device_id, const Options &options) {
  return std::make_unique<CompatBackend>(device_id, copy_pool_config(options));
}

}  // namespace phx::detail
