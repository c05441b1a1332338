// SPDX-License-Identifier: MIT
// cufile: NVIDIA cuFile through libphoenix's cufile engine (libcufile
// loaded at run time), one read per block into the registered pool, the
// way a server would use cuFile without merging.  Unavailable where cuFile
// cannot open its driver or register the file.
//
// Through libphoenix's public API this is one synchronous cuFileRead per
// block; the batch API (cuFileBatchIO*) the tool once called through the
// library's internal loader has no public face (Device::open(cufile) has no
// IoQueue), so the numbers are those of per-block reads.
#include <fcntl.h>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>

#include "common/engine_spec.hpp"
#include "common/gpu.hpp"
#include "engine.hpp"
#include "gpu.hpp"
#include "pool_copy.hpp"

namespace phx::kvcache {
namespace {

class CufileEngine final : public Engine {
 public:
  explicit CufileEngine(const EngineSetup &setup)
      : setup_(setup),
        device_(phxtools::open_device(setup.device, phx::Engine::cufile)),
        pool_(setup.device, setup.block_size * setup.pool_blocks),
        reg_(device_.register_memory(pool_.data(), pool_.size())) {
    try {
      file_ = std::make_unique<File>(setup.file, O_RDONLY, 0, DirectIo::preferred);
    } catch (const std::system_error &e) {
      throw Unavailable(e.what());  // cuFile refusing this file system
    }
    // cuFile registers the file at its first read: refusing the file system
    // (5027, ENOTSUP) shows there, and makes the engine unavailable here
    // rather than a failed run.  The probe's block is overwritten by loads.
    try {
      (void)file_->read(reg_, 0, setup.block_size, 0);
    } catch (const std::system_error &e) {
      if (e.code().value() == ENOTSUP) {
        throw Unavailable(e.what());
      }
      throw;
    }
  }

  std::size_t load(std::span<const std::uint64_t> blocks,
                   std::span<const std::uint64_t> slots) override {
    const std::size_t bs = setup_.block_size;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const std::size_t got = file_->read(reg_, slots[i] * bs, bs, blocks[i] * bs);
      if (got != bs) {
        throw std::runtime_error("block " + std::to_string(blocks[i]) + ": " + std::to_string(got) +
                                 " of " + std::to_string(bs) + " bytes");
      }
    }
    return blocks.size();
  }

  void fetch(std::span<const std::uint64_t> slots, std::span<std::byte> out) override {
    (void)copy_out_slots(static_cast<const std::byte *>(pool_.data()), true, setup_.block_size,
                         slots, out);
  }

  [[nodiscard]] nlohmann::json describe() const override {
    return {{"library_engine", std::string(to_string(device_.engine()))},
            {"pool_memory", "device"},
            {"direct_io", file_->direct_io()}};
  }

 private:
  EngineSetup setup_;
  Device device_;
  phxtools::gpu::DeviceBuffer pool_;
  Registration reg_;
  std::unique_ptr<File> file_;
};

}  // namespace

std::unique_ptr<Engine> make_cufile_engine(const EngineSetup &setup) {
  return std::make_unique<CufileEngine>(setup);
}

}  // namespace phx::kvcache
