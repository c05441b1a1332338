// SPDX-License-Identifier: MIT
// posix: what a loader without GPU Direct Storage does.  pread (O_DIRECT
// when the filesystem has it) into a page-aligned host buffer per thread,
// then a synchronous cudaMemcpy to the GPU; without a usable GPU, pread
// straight into one host buffer.  No driver, no registration.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "common/gpu.hpp"
#include "common/host_buffer.hpp"
#include "loader.hpp"

namespace phx_e2e {
namespace {

class PosixLoader final : public Loader {
 public:
  explicit PosixLoader(int device) : device_(device), gpu_(phxtools::gpu::probe(device).usable) {}

  std::string name() const override { return "posix"; }
  std::string library_engine() const override { return "none"; }
  std::string memory() const override { return gpu_ ? "gpu" : "host"; }

  bool open_driver() override { return false; }
  bool close_driver() override { return false; }
  void open_file(const std::string &path) override { file_.emplace(path, O_RDONLY); }
  void close_file() override { file_.reset(); }

  void allocate(std::size_t bytes, unsigned threads, std::size_t piece) override {
    if (gpu_) {
      gpu_buffer_.emplace(device_, bytes);
      staging_.clear();
      for (unsigned t = 0; t < threads; ++t) {
        staging_.emplace_back(piece);
      }
    } else {
      host_buffer_.emplace(bytes);
    }
  }
  void free_buffer() override {
    staging_.clear();
    gpu_buffer_.reset();
    host_buffer_.reset();
  }

  bool register_buffer(std::size_t /*offset*/, std::size_t /*bytes*/) override { return false; }
  bool deregister_buffer() override { return false; }

  std::size_t read(unsigned thread, std::size_t buffer_offset, std::size_t size,
                   std::uint64_t file_offset) override {
    if (!gpu_) {
      return pread_all(host_buffer_->data() + buffer_offset, size, file_offset);
    }
    phxtools::HostBuffer &stage = staging_.at(thread);
    if (size > stage.size()) {
      throw std::logic_error("posix read larger than its staging buffer");
    }
    const std::size_t n = pread_all(stage.data(), size, file_offset);
    phxtools::gpu::copy_to_device(
        device_, static_cast<std::byte *>(gpu_buffer_->data()) + buffer_offset, stage.data(), n);
    return n;
  }

  void copy_out(std::size_t buffer_offset, std::span<std::byte> out) const override {
    if (gpu_) {
      phxtools::gpu::copy_to_host(
          device_, out.data(), static_cast<const std::byte *>(gpu_buffer_->data()) + buffer_offset,
          out.size());
    } else {
      std::memcpy(out.data(), host_buffer_->data() + buffer_offset, out.size());
    }
  }

 private:
  std::size_t pread_all(std::byte *dst, std::size_t size, std::uint64_t file_offset) {
    std::size_t done = 0;
    while (done < size) {
      const auto at = static_cast<off_t>(file_offset + done);
      const ssize_t n = ::pread(file_->fd(), dst + done, size - done, at);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0) {
        throw std::system_error(errno, std::system_category(),
                                "pread(" + file_->path().string() + ", offset " +
                                    std::to_string(at) + ", size " + std::to_string(size - done) +
                                    ")");
      }
      if (n == 0) {
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    return done;
  }

  int device_;
  bool gpu_;
  std::optional<phx::File> file_;
  std::optional<phxtools::gpu::DeviceBuffer> gpu_buffer_;
  std::optional<phxtools::HostBuffer> host_buffer_;
  std::vector<phxtools::HostBuffer> staging_;
};

}  // namespace

std::unique_ptr<Loader> make_posix_loader(int device) {
  return std::make_unique<PosixLoader>(device);
}

}  // namespace phx_e2e
