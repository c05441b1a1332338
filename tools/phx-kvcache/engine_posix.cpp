// SPDX-License-Identifier: MIT
// posix: what a server without GPUDirect Storage does, one block at a time:
// pread into a pinned host buffer, then cudaMemcpy to the block's pool slot.
// Without a usable GPU the pool is host memory and each block is one pread
// into its slot.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "engine.hpp"
#include "gpu.hpp"
#include "pool_copy.hpp"

namespace phx::kvcache {
namespace {

class PosixEngine final : public Engine {
 public:
  explicit PosixEngine(const EngineSetup &setup) : setup_(setup) {
    const std::size_t bytes = setup.block_size * setup.pool_blocks;
    try {
      pool_gpu_ = std::make_unique<gpu::Memory>(gpu::Kind::device, setup.device, bytes);
      bounce_ = std::make_unique<gpu::Memory>(gpu::Kind::pinned, setup.device, setup.block_size);
    } catch (const Unavailable &) {
      pool_gpu_.reset();
      if (posix_memalign(&pool_host_, 4096, bytes) != 0) {
        throw std::system_error(ENOMEM, std::generic_category(), "host pool");
      }
      std::memset(pool_host_, 0, bytes);
    }
    const int flags = O_RDONLY | O_CLOEXEC | (setup.direct_io ? O_DIRECT : 0);
    fd_ = ::open(setup.file.c_str(), flags);  // NOLINT(cppcoreguidelines-pro-type-vararg)
    if (fd_ < 0 && setup.direct_io && errno == EINVAL) {
      direct_ = false;
      fd_ = ::open(setup.file.c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT(*-vararg)
    }
    if (fd_ < 0) {
      throw std::system_error(errno, std::generic_category(), "open " + setup.file.string());
    }
    direct_ = direct_ && setup.direct_io;
  }
  ~PosixEngine() override {
    ::close(fd_);
    std::free(pool_host_);  // NOLINT(cppcoreguidelines-no-malloc)
  }
  PosixEngine(const PosixEngine &) = delete;
  PosixEngine &operator=(const PosixEngine &) = delete;
  PosixEngine(PosixEngine &&) = delete;
  PosixEngine &operator=(PosixEngine &&) = delete;

  std::size_t load(std::span<const std::uint64_t> blocks,
                   std::span<const std::uint64_t> slots) override {
    const std::size_t bs = setup_.block_size;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      auto *target = pool_gpu_ ? static_cast<std::byte *>(bounce_->data())
                               : static_cast<std::byte *>(pool_host_) + slots[i] * bs;
      read_block(target, blocks[i]);
      if (pool_gpu_) {
        gpu::to_device(static_cast<std::byte *>(pool_gpu_->data()) + slots[i] * bs, target, bs);
      }
    }
    return blocks.size();
  }

  void fetch(std::span<const std::uint64_t> slots, std::span<std::byte> out) override {
    const auto *pool = static_cast<const std::byte *>(pool_gpu_ ? pool_gpu_->data() : pool_host_);
    (void)copy_out_slots(pool, pool_gpu_ != nullptr, setup_.block_size, slots, out);
  }

  [[nodiscard]] nlohmann::json describe() const override {
    return {{"pool_memory", pool_gpu_ ? "device" : "host"},
            {"bounce", pool_gpu_ ? "pinned host, one block" : "none"},
            {"direct_io", direct_}};
  }

 private:
  void read_block(std::byte *dst, std::uint64_t block) const {
    const std::size_t bs = setup_.block_size;
    for (std::size_t done = 0; done < bs;) {
      const ssize_t n = ::pread(fd_, dst + done, bs - done, static_cast<off_t>(block * bs + done));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        throw std::runtime_error(
            "block " + std::to_string(block) + ": " +
            (n == 0 ? std::string("end of file") : std::generic_category().message(errno)));
      }
      done += static_cast<std::size_t>(n);
    }
  }

  EngineSetup setup_;
  std::unique_ptr<gpu::Memory> pool_gpu_;
  std::unique_ptr<gpu::Memory> bounce_;
  void *pool_host_ = nullptr;
  int fd_ = -1;
  bool direct_ = true;
};

}  // namespace

std::unique_ptr<Engine> make_posix_engine(const EngineSetup &setup) {
  return std::make_unique<PosixEngine>(setup);
}

}  // namespace phx::kvcache
