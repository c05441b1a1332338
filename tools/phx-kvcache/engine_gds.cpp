// SPDX-License-Identifier: MIT
// gds: NVIDIA cuFile's batch API (cuFileBatchIOSetUp/Submit/GetStatus/
// Destroy, libcufile loaded at run time by libphoenix's loader), one batch
// entry per block and at most kMaxBatch entries per batch (cuFile's
// default io_batchsize), the way a server would use it without merging.
// Unavailable where cuFile cannot open its driver or register the file
// (error 5027 on the H200's ext4 we measured on).
#include "engine.hpp"
#include "gpu.hpp"
#include "phoenix/config.h"
#include "pool_copy.hpp"

#if PHX_WITH_CUDA

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <vector>

#include "engines/cufile/cufile_loader.hpp"

namespace phx::kvcache {
namespace {

namespace cufile = phx::detail::cufile;

constexpr unsigned kMaxBatch = 128;

class GdsEngine final : public Engine {
 public:
  explicit GdsEngine(const EngineSetup &setup) : setup_(setup) {
    try {
      lib_ = &cufile::driver();
    } catch (const std::system_error &e) {
      throw Unavailable(e.what());
    }
    if (lib_->BatchIOSetUp == nullptr || lib_->BatchIOSubmit == nullptr ||
        lib_->BatchIOGetStatus == nullptr || lib_->BatchIODestroy == nullptr) {
      throw Unavailable("this libcufile has no batch API");
    }
    pool_ = std::make_unique<gpu::Memory>(gpu::Kind::device, setup.device,
                                          setup.block_size * setup.pool_blocks);
    buffer_registered_ = lib_->BufRegister(pool_->data(), pool_->size(), 0).err == 0;
    fd_ = ::open(setup.file.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);  // NOLINT(*-vararg)
    if (fd_ < 0) {
      throw std::system_error(errno, std::generic_category(), "open " + setup.file.string());
    }
    cufile::Descr descr;
    descr.handle.fd = fd_;
    if (const cufile::Error e = lib_->HandleRegister(&handle_, &descr); e.err != 0) {
      handle_ = nullptr;
      const std::string why = cufile::error_text("cuFileHandleRegister", e);
      cleanup();
      throw Unavailable(why);
    }
    if (const cufile::Error e = lib_->BatchIOSetUp(&batch_, kMaxBatch); e.err != 0) {
      batch_ = nullptr;
      const std::string why = cufile::error_text("cuFileBatchIOSetUp", e);
      cleanup();
      throw Unavailable(why);
    }
  }
  ~GdsEngine() override { cleanup(); }
  GdsEngine(const GdsEngine &) = delete;
  GdsEngine &operator=(const GdsEngine &) = delete;
  GdsEngine(GdsEngine &&) = delete;
  GdsEngine &operator=(GdsEngine &&) = delete;

  std::size_t load(std::span<const std::uint64_t> blocks,
                   std::span<const std::uint64_t> slots) override {
    std::vector<cufile::IoParams> params(kMaxBatch);
    std::vector<cufile::IoEvent> events(kMaxBatch);
    const std::size_t bs = setup_.block_size;
    for (std::size_t first = 0; first < blocks.size(); first += kMaxBatch) {
      const auto n = static_cast<unsigned>(std::min<std::size_t>(kMaxBatch, blocks.size() - first));
      for (unsigned i = 0; i < n; ++i) {
        cufile::IoParams &p = params[i];
        p = {};
        p.opcode = cufile::kOpRead;
        p.fh = handle_;
        p.batch.dev_ptr_base = pool_->data();
        p.batch.dev_ptr_offset = static_cast<off_t>(slots[first + i] * bs);
        p.batch.file_offset = static_cast<off_t>(blocks[first + i] * bs);
        p.batch.size = bs;
        p.cookie = &params[i];
      }
      if (const cufile::Error e = lib_->BatchIOSubmit(batch_, n, params.data(), 0); e.err != 0) {
        throw std::runtime_error(cufile::error_text("cuFileBatchIOSubmit", e));
      }
      for (unsigned done = 0; done < n;) {
        unsigned got = n - done;
        if (const cufile::Error e =
                lib_->BatchIOGetStatus(batch_, got, &got, events.data(), nullptr);
            e.err != 0) {
          throw std::runtime_error(cufile::error_text("cuFileBatchIOGetStatus", e));
        }
        for (unsigned i = 0; i < got; ++i) {
          if (events[i].status != cufile::kStatusComplete || events[i].ret != bs) {
            const auto *p = static_cast<const cufile::IoParams *>(events[i].cookie);
            throw std::runtime_error("cuFile batch entry at file offset " +
                                     std::to_string(p->batch.file_offset) + ": status " +
                                     std::to_string(events[i].status) + ", " +
                                     std::to_string(events[i].ret) + " bytes");
          }
        }
        done += got;
      }
    }
    return blocks.size();
  }

  void fetch(std::span<const std::uint64_t> slots, std::span<std::byte> out) override {
    (void)copy_out_slots(static_cast<const std::byte *>(pool_->data()), true, setup_.block_size,
                         slots, out);
  }

  [[nodiscard]] nlohmann::json describe() const override {
    return {{"pool_memory", "device"},
            {"batch_entries", kMaxBatch},
            {"buffer_registered", buffer_registered_},
            {"direct_io", true}};
  }

 private:
  void cleanup() noexcept {
    if (batch_ != nullptr) {
      lib_->BatchIODestroy(batch_);
      batch_ = nullptr;
    }
    if (handle_ != nullptr) {
      lib_->HandleDeregister(handle_);
      handle_ = nullptr;
    }
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (buffer_registered_ && pool_) {
      (void)lib_->BufDeregister(pool_->data());
      buffer_registered_ = false;
    }
  }

  EngineSetup setup_;
  const cufile::Library *lib_ = nullptr;
  std::unique_ptr<gpu::Memory> pool_;
  bool buffer_registered_ = false;
  int fd_ = -1;
  cufile::Handle handle_ = nullptr;
  cufile::BatchHandle batch_ = nullptr;
};

}  // namespace

std::unique_ptr<Engine> make_gds_engine(const EngineSetup &setup) {
  return std::make_unique<GdsEngine>(setup);
}

}  // namespace phx::kvcache

#else  // !PHX_WITH_CUDA

namespace phx::kvcache {

std::unique_ptr<Engine> make_gds_engine(const EngineSetup & /*setup*/) {
  throw Unavailable("this phx-kvcache was built without CUDA (PHX_WITH_CUDA=OFF): no cuFile");
}

}  // namespace phx::kvcache

#endif  // PHX_WITH_CUDA
