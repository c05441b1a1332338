// SPDX-License-Identifier: MIT
// The cuFile (GDS) baseline engine: registration is cuFileBufRegister, I/O
// is cuFileRead/cuFileWrite on a cuFile handle per descriptor.  It exists
// to compare against; libcufile is loaded at run time.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "cuda/gpu.hpp"
#include "engines/cufile/cufile_loader.hpp"
#include "engines/engine_backend.hpp"

namespace phx::detail {
namespace {

class CufileMapping final : public Mapping {
 public:
  CufileMapping(std::uintptr_t address, std::size_t size, bool registered)
      : Mapping(address, size, nullptr), registered_(registered) {}
  ~CufileMapping() override {
    if (registered_) {
      std::string why;
      if (const cufile::Library *lib = cufile::library(why)) {
        // NOLINTNEXTLINE(performance-no-int-to-ptr)
        (void)lib->BufDeregister(reinterpret_cast<const void *>(device_address()));
      }
    }
  }
  CufileMapping(const CufileMapping &) = delete;
  CufileMapping &operator=(const CufileMapping &) = delete;
  CufileMapping(CufileMapping &&) = delete;
  CufileMapping &operator=(CufileMapping &&) = delete;

 private:
  bool registered_;
};

class CufileBackend final : public EngineBackend {
 public:
  explicit CufileBackend(int device_id)
      : gpu_(std::make_unique<cuda::Gpu>(device_id)), lib_(open_driver()) {}

  ~CufileBackend() override {
    for (auto &[fd, h] : handles_) {
      lib_.HandleDeregister(h.handle);
    }
  }
  CufileBackend(const CufileBackend &) = delete;
  CufileBackend &operator=(const CufileBackend &) = delete;
  CufileBackend(CufileBackend &&) = delete;
  CufileBackend &operator=(CufileBackend &&) = delete;

  [[nodiscard]] Engine kind() const noexcept override { return Engine::cufile; }

  [[nodiscard]] std::shared_ptr<Mapping> map(std::uintptr_t address, std::size_t size) override {
    const cuda::ScopedContext scope(gpu_->context());
    const cuda::PointerInfo info = cuda::query_pointer(*cuda::driver(), address);
    if (!info.cuda_known || info.memory_type != cuda::kMemoryTypeDevice) {
      throw_errno(EFAULT, "the cufile engine registers CUDA device memory only");
    }
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    const cufile::Error e = lib_.BufRegister(reinterpret_cast<const void *>(address), size, 0);
    // An unregistered buffer still works through cuFile's own bounce buffers.
    return std::make_shared<CufileMapping>(address, size, e.err == 0);
  }

  [[nodiscard]] TransferResult transfer(Direction dir, int fd, const Mapping &mapping,
                                        std::size_t mapping_offset, std::size_t size,
                                        std::uint64_t file_offset,
                                        const IoPolicy & /*policy*/) noexcept override {
    TransferResult result;
    try {
      const cuda::ScopedContext scope(gpu_->context());
      void *h = handle(fd, result);
      if (h == nullptr) {
        return result;
      }
      // NOLINTNEXTLINE(performance-no-int-to-ptr)
      auto *base = reinterpret_cast<void *>(mapping.device_address());
      while (result.done < size) {
        const std::size_t n = std::min(size - result.done, kMaxSyscallBytes);
        const auto file_at = static_cast<off_t>(file_offset + result.done);
        const auto buf_at = static_cast<off_t>(mapping_offset + result.done);
        const ssize_t r = dir == Direction::read ? lib_.Read(h, base, n, file_at, buf_at)
                                                 : lib_.Write(h, base, n, file_at, buf_at);
        if (r < 0) {
          const int err = r == -1 ? errno : EIO;
          result.error = err;
          if (r != -1) {
            result.detail =
                cufile::error_text(dir == Direction::read ? "cuFileRead" : "cuFileWrite",
                                   cufile::Error{static_cast<int>(-r), 0});
          }
          return result;
        }
        if (r == 0) {
          if (dir == Direction::write) {
            result.error = EIO;
          }
          break;
        }
        result.done += static_cast<std::size_t>(r);
      }
    } catch (const std::system_error &e) {
      result.error = e.code().value();
      result.detail = e.what();
    } catch (...) {
      result.error = ENOMEM;
    }
    return result;
  }

  /// The cuFile handle of @p fd (registered on first use, re-registered if
  /// the descriptor now names another file); null with @p failed set.
  void *handle(int fd, TransferResult &failed) {
    struct stat st = {};
    if (::fstat(fd, &st) != 0) {
      failed.error = errno;
      return nullptr;
    }
    const std::lock_guard lock(mutex_);
    auto it = handles_.find(fd);
    if (it != handles_.end() && (it->second.dev != st.st_dev || it->second.ino != st.st_ino)) {
      lib_.HandleDeregister(it->second.handle);
      handles_.erase(it);
      it = handles_.end();
    }
    if (it == handles_.end()) {
      cufile::Descr descr;
      descr.handle.fd = fd;
      cufile::Handle h = nullptr;
      const cufile::Error e = lib_.HandleRegister(&h, &descr);
      if (e.err != 0) {
        failed.error = ENOTSUP;
        failed.detail = cufile::error_text("cuFileHandleRegister", e);
        return nullptr;
      }
      it = handles_.emplace(fd, Registered{st.st_dev, st.st_ino, h}).first;
    }
    return it->second.handle;
  }

  /// cuFileBatchIOSetUp/Submit/GetStatus.  Throws std::system_error
  /// (ENOTSUP when this libcufile has no batch API).
  [[nodiscard]] TransferResult native_batch(Direction dir, int fd, const Mapping &mapping,
                                            std::span<const BatchPiece> pieces) override;
  /// cuFileReadAsync/WriteAsync, the stream registered with
  /// cuFileStreamRegister on first use.
  void native_submit_async(Direction dir, int fd, const Mapping &mapping, StreamParams &params,
                           CUstream_st *stream) override;

 private:
  static const cufile::Library &open_driver() {
    if (cuda::driver() == nullptr) {
      throw_errno(ENODEV, cuda::unavailable_reason());
    }
    return cufile::driver();
  }

  struct Registered {
    dev_t dev;
    ino_t ino;
    cufile::Handle handle;
  };
  std::unique_ptr<cuda::Gpu> gpu_;
  const cufile::Library &lib_;
  std::mutex mutex_;
  std::map<int, Registered> handles_;
};

TransferResult CufileBackend::native_batch(Direction dir, int fd, const Mapping &mapping,
                                           std::span<const BatchPiece> pieces) {
  const cufile::Library &lib = lib_;
  if (lib.BatchIOSetUp == nullptr || lib.BatchIOSubmit == nullptr ||
      lib.BatchIOGetStatus == nullptr || lib.BatchIODestroy == nullptr) {
    throw_errno(ENOTSUP, "this libcufile has no batch API");
  }
  const cuda::ScopedContext scope(gpu_->context());
  TransferResult result;
  void *h = handle(fd, result);
  if (h == nullptr) {
    return result;
  }
  std::vector<cufile::IoParams> params(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    auto &p = params[i];
    p.opcode = dir == Direction::read ? cufile::kOpRead : cufile::kOpWrite;
    p.fh = h;
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    p.batch.dev_ptr_base = reinterpret_cast<void *>(mapping.device_address());
    p.batch.dev_ptr_offset = static_cast<off_t>(pieces[i].buffer_offset);
    p.batch.file_offset = static_cast<off_t>(pieces[i].file_offset);
    p.batch.size = pieces[i].size;
    p.cookie = &params[i];
  }
  cufile::BatchHandle batch = nullptr;
  if (const cufile::Error e = lib.BatchIOSetUp(&batch, static_cast<unsigned>(params.size()));
      e.err != 0) {
    result.error = EIO;
    result.detail = cufile::error_text("cuFileBatchIOSetUp", e);
    return result;
  }
  if (const cufile::Error e =
          lib.BatchIOSubmit(batch, static_cast<unsigned>(params.size()), params.data(), 0);
      e.err != 0) {
    lib.BatchIODestroy(batch);
    result.error = EIO;
    result.detail = cufile::error_text("cuFileBatchIOSubmit", e);
    return result;
  }
  std::vector<cufile::IoEvent> events(params.size());
  std::size_t completed = 0;
  while (completed < params.size()) {
    auto n = static_cast<unsigned>(params.size() - completed);
    if (const cufile::Error e = lib.BatchIOGetStatus(batch, n, &n, events.data(), nullptr);
        e.err != 0) {
      result.error = EIO;
      result.detail = cufile::error_text("cuFileBatchIOGetStatus", e);
      break;
    }
    for (unsigned i = 0; i < n; ++i) {
      if (events[i].status != cufile::kStatusComplete && result.error == 0) {
        result.error = EIO;
        result.detail = "cuFile batch entry failed with status " + std::to_string(events[i].status);
      } else {
        result.done += events[i].ret;
      }
    }
    completed += n;
  }
  lib.BatchIODestroy(batch);
  return result;
}

void CufileBackend::native_submit_async(Direction dir, int fd, const Mapping &mapping,
                                        StreamParams &params, CUstream_st *stream) {
  const cufile::Library &lib = lib_;
  if (lib.ReadAsync == nullptr || lib.WriteAsync == nullptr || lib.StreamRegister == nullptr) {
    throw_errno(ENOTSUP, "this libcufile has no stream API");
  }
  const cuda::ScopedContext scope(gpu_->context());
  TransferResult failed;
  void *h = handle(fd, failed);
  if (h == nullptr) {
    throw_errno(failed.error, failed.detail);
  }
  // Flags 0: every parameter is read when the stream reaches the operation.
  if (const cufile::Error e = lib.StreamRegister(stream, 0); e.err != 0) {
    throw_errno(EIO, cufile::error_text("cuFileStreamRegister", e));
  }
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  auto *base = reinterpret_cast<void *>(mapping.device_address());
  const cufile::Error e = dir == Direction::read
                              ? lib.ReadAsync(h, base, &params.size, &params.file_offset,
                                              &params.buffer_offset, &params.bytes_done, stream)
                              : lib.WriteAsync(h, base, &params.size, &params.file_offset,
                                               &params.buffer_offset, &params.bytes_done, stream);
  if (e.err != 0) {
    throw_errno(EIO, cufile::error_text(
                         dir == Direction::read ? "cuFileReadAsync" : "cuFileWriteAsync", e));
  }
}

}  // namespace

std::unique_ptr<EngineBackend> make_cufile_backend(int device_id, const Options & /*options*/) {
  return std::make_unique<CufileBackend>(device_id);
}

}  // namespace phx::detail
