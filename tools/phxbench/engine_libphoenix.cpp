// SPDX-License-Identifier: MIT
#include "engine_libphoenix.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "common/gpu.hpp"
#include "common/host_buffer.hpp"
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

using phxtools::HostBuffer;
namespace gpu = phxtools::gpu;

bool unavailable_errno(int err) {
  return err == ENODEV || err == ENOTSUP || err == EPROTO;
}

enum class BufferMemory { host, gpu };

// Threads given --device-addr ranges take one each, this far apart, so two
// ranges never share a page of the module (whose page size is at most this).
constexpr std::uint64_t kDeviceRangeAlign = std::uint64_t{2} << 20;

// Where a worker's buffer lives: GPU or host memory this tool allocates, or
// device addresses given on the command line.
struct BufferPlace {
  BufferMemory memory;
  int gpu_device;                            ///< CUDA device of GPU memory, else -1
  std::optional<std::uint64_t> device_addr;  ///< set: register these addresses
};

class LibphoenixThreadIo final : public ThreadIo {
 public:
  LibphoenixThreadIo(phx::Device &device, phx::File &file, const BufferPlace &place,
                     std::string_view tool_name, std::size_t slot_size, unsigned slots)
      : file_(file),
        gpu_device_(place.gpu_device),
        tool_name_(tool_name),
        stride_(slot_stride(slot_size)) {
    const std::size_t bytes = stride_ * slots;
    void *base = nullptr;
    if (place.device_addr) {
      // NOLINTNEXTLINE(performance-no-int-to-ptr): device addresses are integers here
      base = reinterpret_cast<void *>(static_cast<std::uintptr_t>(*place.device_addr));
    } else if (place.memory == BufferMemory::gpu) {
      gpu_buffer_ = std::make_unique<gpu::DeviceBuffer>(gpu_device_, bytes);
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
    std::byte *dst = slot_address(slot);
    if (gpu_buffer_) {
      gpu::copy_to_device(gpu_device_, dst, data.data(), data.size());
    } else {
      std::memcpy(dst, data.data(), data.size());
    }
  }

  void store(unsigned slot, std::span<std::byte> out) override {
    const std::byte *src = slot_address(slot);
    if (gpu_buffer_) {
      gpu::copy_to_host(gpu_device_, out.data(), src, out.size());
    } else {
      std::memcpy(out.data(), src, out.size());
    }
  }

 private:
  // Memory this tool allocated is reached at its own address (by cudaMemcpy
  // for the GPU's); device addresses given on the command line through the
  // registration's host view.
  [[nodiscard]] std::byte *slot_address(unsigned slot) const {
    std::byte *base = host_buffer_ || gpu_buffer_ ? static_cast<std::byte *>(reg_.device_address())
                                                  : reg_.host_view();
    return base + slot * stride_;
  }

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
  LibphoenixEngine(phx::Device device, std::string_view tool_name, BufferPlace place,
                   std::string gpu_name)
      : device_(std::move(device)),
        tool_name_(tool_name),
        place_(place),
        next_addr_(place.device_addr),
        gpu_name_(std::move(gpu_name)) {}

  EngineInfo info() const override {
    std::string detail = device_.engine_reason();
    if (!gpu_name_.empty()) {
      detail += "; GPU " + std::to_string(place_.gpu_device) + ": " + gpu_name_;
    }
    if (place_.device_addr) {
      std::ostringstream addr;
      addr << std::hex << *place_.device_addr;
      detail += "; device addresses from 0x" + addr.str() + " (--device-addr)";
    }
    return {std::string(phx::to_string(device_.engine())),
            place_.memory == BufferMemory::gpu ? "gpu" : "host", detail};
  }

  std::unique_ptr<ThreadIo> open_thread(phx::File &file, std::size_t slot_size,
                                        unsigned slots) override {
    BufferPlace place{place_.memory, place_.gpu_device, std::nullopt};
    if (next_addr_) {
      const std::lock_guard lock(mutex_);
      place.device_addr = next_addr_;
      const std::uint64_t bytes = slot_stride(slot_size) * slots;
      *next_addr_ += (bytes + kDeviceRangeAlign - 1) / kDeviceRangeAlign * kDeviceRangeAlign;
    }
    return std::make_unique<LibphoenixThreadIo>(device_, file, place, tool_name_, slot_size, slots);
  }

  int cuda_device() const noexcept override { return place_.gpu_device; }

 private:
  phx::Device device_;
  std::string tool_name_;
  BufferPlace place_;
  std::mutex mutex_;
  std::optional<std::uint64_t> next_addr_;  // the next thread's range, under mutex_
  std::string gpu_name_;
};

}  // namespace

std::unique_ptr<Engine> make_libphoenix_engine(const Options &options,
                                               const phxtools::EngineSpec &spec) {
  const std::string name(spec.name);
  const BufferMemory memory = spec.gpu_memory ? BufferMemory::gpu : BufferMemory::host;
  phx::Device device = phxtools::open_device(options.device, spec.engine);
  BufferPlace place{memory, -1, std::nullopt};
  std::string gpu_name;
  if (options.device_addr) {
    if (memory != BufferMemory::gpu) {
      throw std::invalid_argument("--device-addr: the " + name +
                                  " engine registers host memory, not device addresses");
    }
    place.device_addr = options.device_addr;
  } else if (memory == BufferMemory::gpu) {
    const gpu::Probe probe = gpu::probe(options.device);
    if (!probe.usable) {
      throw Unavailable(name + " engine: needs GPU memory, but " + probe.reason);
    }
    place.gpu_device = options.device;
    gpu_name = probe.name;
  }
  return std::make_unique<LibphoenixEngine>(std::move(device), name, place, std::move(gpu_name));
}

}  // namespace phxbench
