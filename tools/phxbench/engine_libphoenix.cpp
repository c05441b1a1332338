// SPDX-License-Identifier: MIT
#include "engine_libphoenix.hpp"

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "gpu.hpp"
#include "host_buffer.hpp"
#include "phoenix/phoenix.h"

namespace phxbench {
namespace {

// Stream-ordered I/O is new in libphoenix; compiling against a header that
// lacks it leaves stream mode unavailable instead of breaking the build.
template <typename F>
concept HasStreamIo = requires(F &file, const phx::Registration &reg, ssize_t *done,
                               CUstream_st *stream) {
  file.read_async(reg, 0, 0, 0, done, stream);
  file.write_async(reg, 0, 0, 0, done, stream);
};

template <typename F>
void enqueue_stream(F &file, IoDir dir, const phx::Registration &reg, std::size_t reg_offset,
                    std::size_t size, std::uint64_t offset, ssize_t *done, CUstream_st *stream) {
  if constexpr (HasStreamIo<F>) {
    if (dir == IoDir::read) {
      file.read_async(reg, reg_offset, size, offset, done, stream);
    } else {
      file.write_async(reg, reg_offset, size, offset, done, stream);
    }
  } else {
    throw Unavailable("this libphoenix has no stream-ordered I/O (File::read_async)");
  }
}

bool unavailable_errno(int err) {
  return err == ENODEV || err == ENOTSUP || err == EPROTO;
}

class LibphoenixThreadIo final : public ThreadIo {
 public:
  LibphoenixThreadIo(phx::Device &device, phx::File &file, BufferMemory memory, int gpu_device,
                     std::string_view tool_name, std::size_t slot_size, unsigned slots)
      : file_(file),
        gpu_device_(gpu_device),
        tool_name_(tool_name),
        stride_(slot_stride(slot_size)) {
    const std::size_t bytes = stride_ * slots;
    void *base = nullptr;
    if (memory == BufferMemory::gpu) {
      gpu_buffer_ = std::make_unique<gpu::DeviceBuffer>(gpu_device, bytes);
      base = gpu_buffer_->data();
    } else {
      host_buffer_ = std::make_unique<HostBuffer>(bytes);
      base = host_buffer_->data();
    }
    try {
      reg_ = device.register_memory(base, bytes);
    } catch (const std::system_error &e) {
      if (unavailable_errno(e.code().value())) {
        throw Unavailable(std::string(tool_name) + " engine: " + e.what());
      }
      throw;
    }
  }

  void check_mode(Mode mode) const override {
    if ((mode == Mode::async || mode == Mode::batch) && reg_.host_view() == nullptr) {
      throw Unavailable(tool_name_ +
                        " engine: its registrations have no host view, so io_uring "
                        "(-m async, -m batch) cannot reach them; use -m sync or -m "
                        "stream");
    }
    if (mode == Mode::stream) {
      if (gpu_device_ < 0) {
        throw Unavailable(tool_name_ + " engine: -m stream needs GPU memory and a CUDA stream");
      }
      if constexpr (!HasStreamIo<phx::File>) {
        throw Unavailable("this libphoenix has no stream-ordered I/O (File::read_async)");
      }
    }
  }

  std::size_t transfer(IoDir dir, unsigned slot, std::size_t size, std::uint64_t offset) override {
    return dir == IoDir::read ? file_.read(reg_, slot * stride_, size, offset)
                              : file_.write(reg_, slot * stride_, size, offset);
  }

  phx::IoRequest request(IoDir dir, unsigned slot, std::size_t size, std::uint64_t offset,
                         std::uint64_t user_data) override {
    return dir == IoDir::read
               ? phx::IoRequest::read(file_, reg_, slot * stride_, size, offset, user_data)
               : phx::IoRequest::write(file_, reg_, slot * stride_, size, offset, user_data);
  }

  void enqueue(IoDir dir, unsigned slot, std::size_t size, std::uint64_t offset, ssize_t *done,
               CUstream_st *stream) override {
    enqueue_stream(file_, dir, reg_, slot * stride_, size, offset, done, stream);
  }

  void load(unsigned slot, std::span<const std::byte> data) override {
    std::byte *dst = static_cast<std::byte *>(reg_.device_address()) + slot * stride_;
    if (gpu_buffer_) {
      gpu::copy_to_device(gpu_device_, dst, data.data(), data.size());
    } else {
      std::memcpy(dst, data.data(), data.size());
    }
  }

  void store(unsigned slot, std::span<std::byte> out) override {
    const std::byte *src = static_cast<const std::byte *>(reg_.device_address()) + slot * stride_;
    if (gpu_buffer_) {
      gpu::copy_to_host(gpu_device_, out.data(), src, out.size());
    } else {
      std::memcpy(out.data(), src, out.size());
    }
  }

 private:
  phx::File &file_;
  int gpu_device_;
  std::string tool_name_;
  std::size_t stride_;
  // Declared before reg_: the registration goes first, then the memory.
  std::unique_ptr<HostBuffer> host_buffer_;
  std::unique_ptr<gpu::DeviceBuffer> gpu_buffer_;
  phx::Registration reg_;
};

class LibphoenixEngine final : public Engine {
 public:
  LibphoenixEngine(phx::Device device, std::string_view tool_name, BufferMemory memory,
                   int gpu_device, std::string gpu_name)
      : device_(std::move(device)),
        tool_name_(tool_name),
        memory_(memory),
        gpu_device_(gpu_device),
        gpu_name_(std::move(gpu_name)) {}

  EngineInfo info() const override {
    std::string detail = device_.engine_reason();
    if (!gpu_name_.empty()) {
      detail += "; GPU " + std::to_string(gpu_device_) + ": " + gpu_name_;
    }
    return {std::string(phx::to_string(device_.engine())),
            memory_ == BufferMemory::gpu ? "gpu" : "host", detail};
  }

  std::unique_ptr<ThreadIo> open_thread(phx::File &file, std::size_t slot_size,
                                        unsigned slots) override {
    return std::make_unique<LibphoenixThreadIo>(device_, file, memory_, gpu_device_, tool_name_,
                                                slot_size, slots);
  }

  int cuda_device() const noexcept override { return gpu_device_; }

 private:
  phx::Device device_;
  std::string tool_name_;
  BufferMemory memory_;
  int gpu_device_;
  std::string gpu_name_;
};

}  // namespace

std::unique_ptr<Engine> make_libphoenix_engine(const Options &options, std::string_view tool_name,
                                               std::string_view library_engine,
                                               BufferMemory memory) {
  const std::string name(tool_name);
  phx::Engine engine = phx::Engine::host;
  try {
    engine = phx::parse_engine(library_engine);
  } catch (const std::system_error &) {
    throw Unavailable(name + " engine: not available in this build (libphoenix " + phxfs_version() +
                      " has no '" + std::string(library_engine) + "' engine)");
  }
  std::optional<phx::Device> device;
  try {
    device.emplace(phx::Device::open(options.device, engine));
  } catch (const std::system_error &e) {
    if (unavailable_errno(e.code().value())) {
      throw Unavailable(name + " engine: " + e.what());
    }
    throw;
  }
  int gpu_device = -1;
  std::string gpu_name;
  if (memory == BufferMemory::gpu) {
    const gpu::Probe probe = gpu::probe(options.device);
    if (!probe.usable) {
      throw Unavailable(name + " engine: needs GPU memory, but " + probe.reason);
    }
    gpu_device = options.device;
    gpu_name = probe.name;
  }
  return std::make_unique<LibphoenixEngine>(std::move(*device), tool_name, memory, gpu_device,
                                            std::move(gpu_name));
}

}  // namespace phxbench
