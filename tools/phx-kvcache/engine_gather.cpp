// SPDX-License-Identifier: MIT
// Engines on phx::Gather: the pool is a registration and each sequence's
// blocks are one gather (merged, split and submitted by libphoenix).
//   phoenix: direct engine, pool in device memory (or at --device-addr)
//   compat:  compat engine, pool in device memory
//   host:    host engine, pool in ordinary host memory
//   pinned:  host engine, pool in pinned host memory: the ceiling for the
//            same access pattern with no copy to the GPU
#include <fcntl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "common/engine_names.hpp"
#include "common/engine_spec.hpp"
#include "engine.hpp"
#include "gpu.hpp"
#include "phoenix/gather.hpp"
#include "pool_copy.hpp"

namespace phx::kvcache {
namespace {

// libphoenix's default request limit for compat gathers (gather.hpp).
constexpr std::size_t kCompatRequest = std::size_t{256} << 10;

struct HostMemory {
  explicit HostMemory(std::size_t bytes) : size(bytes) {
    if (posix_memalign(&data, 4096, bytes) != 0) {
      throw std::system_error(ENOMEM, std::generic_category(),
                              "host pool of " + std::to_string(bytes) + " bytes");
    }
    std::memset(data, 0, bytes);
  }
  ~HostMemory() { std::free(data); }  // NOLINT(cppcoreguidelines-no-malloc)
  HostMemory(const HostMemory &) = delete;
  HostMemory &operator=(const HostMemory &) = delete;
  HostMemory(HostMemory &&) = delete;
  HostMemory &operator=(HostMemory &&) = delete;
  void *data = nullptr;
  std::size_t size;
};

phx::Engine library_engine(const std::string &name) {
  return name == "direct"   ? phx::Engine::direct
         : name == "compat" ? phx::Engine::compat
                            : phx::Engine::host;
}

class GatherEngine final : public Engine {
 public:
  GatherEngine(const std::string &name, const EngineSetup &setup)
      : name_(name), setup_(setup), device_(open_device(name, setup)) {
    const std::size_t bytes = setup.block_size * setup.pool_blocks;
    void *pool = nullptr;
    if (setup.device_address) {
      // NOLINTNEXTLINE(performance-no-int-to-ptr): a device address, not a host pointer
      pool = reinterpret_cast<void *>(*setup.device_address);
      memory_ = "device address";
    } else if (name == "host") {
      host_ = std::make_unique<HostMemory>(bytes);
      pool = host_->data;
      memory_ = "host";
    } else {
      gpu_ = std::make_unique<gpu::Memory>(name == "pinned" ? gpu::Kind::pinned : gpu::Kind::device,
                                           setup.device, bytes);
      pool = gpu_->data();
      memory_ = name == "pinned" ? "pinned host" : "device";
    }
    pool_ = device_.register_memory(pool, bytes);
    file_ = std::make_unique<File>(setup.file, O_RDONLY, 0,
                                   setup.direct_io ? DirectIo::preferred : DirectIo::off);
    // The ceiling reads exactly the requests compat reads: its request limit.
    const std::size_t max_request =
        setup.max_request == 0 && name == "pinned" ? kCompatRequest : setup.max_request;
    gather_ = std::make_unique<Gather>(device_, GatherOptions{.max_request = max_request,
                                                              .queue_depth = setup.queue_depth,
                                                              .merge = setup.merge});
    // The staging and the ring are set up before the replay, as a server
    // would at start-up; the replay times the loads alone.
    gather_->prepare();
  }

  std::size_t load(std::span<const std::uint64_t> blocks,
                   std::span<const std::uint64_t> slots) override {
    const GatherResult r =
        gather_->read(paged_blocks(*file_, pool_, setup_.block_size, blocks, slots));
    if (!r.ok()) {
      const GatherFailure &f = r.failures.front();
      throw std::runtime_error(
          "block " + std::to_string(blocks[f.index]) + " (" + std::to_string(r.failures.size()) +
          " of " + std::to_string(blocks.size()) + " blocks failed): " +
          (f.error != 0 ? std::generic_category().message(f.error) : std::string("end of file")) +
          " after " + std::to_string(f.bytes) + " bytes");
    }
    return r.requests;
  }

  void fetch(std::span<const std::uint64_t> slots, std::span<std::byte> out) override {
    const bool on_device = pool_.host_view() == nullptr;
    const auto *pool =
        on_device ? static_cast<const std::byte *>(pool_.device_address()) : pool_.host_view();
    (void)copy_out_slots(pool, on_device, setup_.block_size, slots, out);
  }

  [[nodiscard]] nlohmann::json describe() const override {
    return {{"library_engine", std::string(to_string(device_.engine()))},
            {"pool_memory", memory_},
            {"queue_depth", gather_->options().queue_depth},
            {"max_request", gather_->options().max_request},
            {"merge", gather_->options().merge},
            {"direct_io", file_->direct_io()}};
  }

 private:
  static Device open_device(const std::string &name, const EngineSetup &setup) {
    return phxtools::open_device(setup.device, library_engine(name));
  }

  std::string name_;
  EngineSetup setup_;
  Device device_;
  std::string memory_;
  std::unique_ptr<HostMemory> host_;
  std::unique_ptr<gpu::Memory> gpu_;
  Registration pool_;
  std::unique_ptr<File> file_;
  std::unique_ptr<Gather> gather_;
};

}  // namespace

std::unique_ptr<Engine> make_gather_engine(const std::string &name, const EngineSetup &setup) {
  return std::make_unique<GatherEngine>(name, setup);
}

std::unique_ptr<Engine> make_engine(const std::string &given, const EngineSetup &setup) {
  const std::string name = phxtools::parse_engine_name(given, engine_names());
  // --device-addr names device memory that only the direct engine can
  // address; every other engine of the same run allocates its own pool.
  EngineSetup own = setup;
  if (name != "direct") {
    own.device_address.reset();
  }
  if (name == "posix") {
    return make_posix_engine(own);
  }
  if (name == "cufile") {
    return make_cufile_engine(own);
  }
  return make_gather_engine(name, own);
}

const std::vector<std::string> &engine_names() {
  static const std::vector<std::string> names{"direct", "compat", "cufile",
                                              "posix",  "host",   "pinned"};
  return names;
}

}  // namespace phx::kvcache
