// SPDX-License-Identifier: MIT
// phoenix, compat, gds and host: the steps are libphoenix's calls.
#include <fcntl.h>

#include <optional>
#include <stdexcept>

#include "loader.hpp"

namespace phx_e2e {
namespace {

class LibphoenixLoader final : public Loader {
 public:
  LibphoenixLoader(const phxtools::EngineSpec &spec, phx::Engine engine, int device,
                   std::optional<std::uint64_t> device_addr)
      : spec_(spec), engine_(engine), device_id_(device), device_addr_(device_addr) {}

  std::string name() const override { return spec_.name; }
  std::string library_engine() const override { return spec_.name; }
  std::string memory() const override {
    return device_addr_ ? "device-addr" : spec_.gpu_memory ? "gpu" : "host";
  }

  bool open_driver() override {
    device_.emplace(phx::Device::open(device_id_, engine_));
    return true;
  }
  bool close_driver() override {
    device_.reset();
    return true;
  }
  void open_file(const std::string &path) override { file_.emplace(path, O_RDONLY); }
  void close_file() override { file_.reset(); }

  void allocate(std::size_t bytes, unsigned /*threads*/, std::size_t /*piece*/) override {
    memory_.emplace(spec_, device_id_, bytes, device_addr_);
  }
  void free_buffer() override { memory_.reset(); }

  bool register_buffer(std::size_t offset, std::size_t bytes) override {
    reg_offset_ = offset;
    reg_ = device_->register_memory(static_cast<std::byte *>(memory_->data()) + offset, bytes);
    return true;
  }
  bool deregister_buffer() override {
    reg_.release();
    return true;
  }

  std::size_t read(unsigned /*thread*/, std::size_t buffer_offset, std::size_t size,
                   std::uint64_t file_offset) override {
    if (buffer_offset < reg_offset_) {
      throw std::logic_error("read outside the registration");
    }
    return file_->read(reg_, buffer_offset - reg_offset_, size, file_offset);
  }

  void copy_out(std::size_t buffer_offset, std::span<std::byte> out) const override {
    memory_->copy_out(&reg_, buffer_offset, out);
  }

 private:
  const phxtools::EngineSpec &spec_;
  phx::Engine engine_;
  int device_id_;
  std::optional<std::uint64_t> device_addr_;
  // Destroyed in reverse: the registration first, then memory, file, device.
  std::optional<phx::Device> device_;
  std::optional<phx::File> file_;
  std::optional<phxtools::Memory> memory_;
  std::size_t reg_offset_ = 0;
  phx::Registration reg_;
};

}  // namespace

std::unique_ptr<Loader> make_libphoenix_loader(const phxtools::EngineSpec &spec, phx::Engine engine,
                                               int device,
                                               std::optional<std::uint64_t> device_addr) {
  return std::make_unique<LibphoenixLoader>(spec, engine, device, device_addr);
}

}  // namespace phx_e2e
