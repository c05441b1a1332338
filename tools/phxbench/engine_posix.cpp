// SPDX-License-Identifier: MIT
// posix: no libphoenix in the data path.  pread/pwrite (or io_uring through
// phx::IoQueue, which issues plain reads and writes) into a page-aligned
// host buffer, then cudaMemcpy to the GPU when there is one: what an
// application without GPU Direct Storage does.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>

#include "common/gpu.hpp"
#include "common/host_buffer.hpp"
#include "engine.hpp"

namespace phxbench {
namespace {

namespace gpu = phxtools::gpu;
using phxtools::HostBuffer;

class PosixThreadIo final : public ThreadIo {
 public:
  PosixThreadIo(phx::File &file, int gpu_device, std::size_t slot_size, unsigned slots)
      : file_(file),
        gpu_device_(gpu_device),
        stride_(slot_stride(slot_size)),
        host_(stride_ * slots) {
    if (file.direct_io() && slot_size % file.offset_alignment() != 0) {
      throw Unavailable("posix engine: with O_DIRECT the I/O size must be a multiple of " +
                        std::to_string(file.offset_alignment()) +
                        " bytes on this file; use --no-direct, or the host engine, which stages "
                        "unaligned pieces");
    }
    if (gpu_device >= 0) {
      gpu_ = std::make_unique<gpu::DeviceBuffer>(gpu_device, stride_ * slots);
    }
  }

  std::size_t transfer(IoDir dir, unsigned slot, std::size_t size, std::uint64_t offset) override {
    if (dir == IoDir::write) {
      before_write(slot, size);
    }
    std::byte *buf = host_slot(slot);
    std::size_t done = 0;
    while (done < size) {
      const auto at = static_cast<off_t>(offset + done);
      const ssize_t n = dir == IoDir::read ? ::pread(file_.fd(), buf + done, size - done, at)
                                           : ::pwrite(file_.fd(), buf + done, size - done, at);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0) {
        throw std::system_error(errno, std::system_category(),
                                std::string(dir == IoDir::read ? "pread" : "pwrite") + "(" +
                                    file_.path().string() + ", offset " + std::to_string(at) +
                                    ", size " + std::to_string(size - done) + ")");
      }
      if (n == 0) {
        break;  // end of file (reads); a zero-byte write is reported by the caller as short
      }
      done += static_cast<std::size_t>(n);
    }
    if (dir == IoDir::read) {
      after_read(slot, done);
    }
    return done;
  }

  phx::IoRequest request(IoDir dir, unsigned slot, std::size_t size, std::uint64_t offset,
                         std::uint64_t user_data) override {
    phx::IoRequest req;
    req.op = dir == IoDir::read ? phx::IoOp::read : phx::IoOp::write;
    req.file = &file_;
    req.buffer = host_slot(slot);
    req.size = size;
    req.offset = offset;
    req.user_data = user_data;
    return req;
  }

  void before_write(unsigned slot, std::size_t size) override {
    if (gpu_) {
      gpu::copy_to_host(gpu_device_, host_slot(slot), gpu_slot(slot), size);
    }
  }

  void after_read(unsigned slot, std::size_t bytes) override {
    if (gpu_) {
      gpu::copy_to_device(gpu_device_, gpu_slot(slot), host_slot(slot), bytes);
    }
  }

  void load(unsigned slot, std::span<const std::byte> data) override {
    if (gpu_) {
      gpu::copy_to_device(gpu_device_, gpu_slot(slot), data.data(), data.size());
    } else {
      std::memcpy(host_slot(slot), data.data(), data.size());
    }
  }

  void store(unsigned slot, std::span<std::byte> out) override {
    if (gpu_) {
      gpu::copy_to_host(gpu_device_, out.data(), gpu_slot(slot), out.size());
    } else {
      std::memcpy(out.data(), host_slot(slot), out.size());
    }
  }

 private:
  [[nodiscard]] std::byte *host_slot(unsigned slot) const { return host_.data() + slot * stride_; }
  [[nodiscard]] std::byte *gpu_slot(unsigned slot) const {
    return static_cast<std::byte *>(gpu_->data()) + slot * stride_;
  }

  phx::File &file_;
  int gpu_device_;
  std::size_t stride_;
  HostBuffer host_;
  std::unique_ptr<gpu::DeviceBuffer> gpu_;
};

class PosixEngine final : public Engine {
 public:
  explicit PosixEngine(const Options &options) : probe_(gpu::probe(options.device)) {
    if (probe_.usable) {
      gpu_device_ = options.device;
    }
  }

  EngineInfo info() const override {
    if (gpu_device_ >= 0) {
      return {
          "none", "gpu",
          "host buffer + cudaMemcpy to GPU " + std::to_string(gpu_device_) + ": " + probe_.name};
    }
    return {"none", "host", "host buffer only: " + probe_.reason};
  }

  std::unique_ptr<ThreadIo> open_thread(phx::File &file, std::size_t slot_size,
                                        unsigned slots) override {
    return std::make_unique<PosixThreadIo>(file, gpu_device_, slot_size, slots);
  }

  int cuda_device() const noexcept override { return gpu_device_; }

 private:
  gpu::Probe probe_;
  int gpu_device_ = -1;
};

}  // namespace

std::unique_ptr<Engine> make_posix_engine(const Options &options) {
  return std::make_unique<PosixEngine>(options);
}

}  // namespace phxbench
