// SPDX-License-Identifier: MIT
#include <array>

#include "common/engine_names.hpp"
#include "common/engine_spec.hpp"
#include "engine.hpp"
#include "engine_libphoenix.hpp"

namespace phxbench {

void ThreadIo::check_mode(Mode mode) const {
  if (mode == Mode::stream) {
    throw Unavailable("stream mode needs an engine with GPU memory and stream-ordered I/O");
  }
}

void ThreadIo::enqueue(IoDir /*dir*/, unsigned /*slot*/, std::size_t /*size*/,
                       std::uint64_t /*offset*/, ssize_t * /*done*/, CUstream_st * /*stream*/) {
  throw Unavailable("this engine has no stream-ordered I/O");
}

namespace {

// The libphoenix engines differ only in the row of phxtools::libphoenix_engines().
template <phx::Engine E>
std::unique_ptr<Engine> make_library_engine(const Options &options) {
  return make_libphoenix_engine(options, *phxtools::find_libphoenix_engine(phx::to_string(E)));
}

constexpr std::array<EngineEntry, 5> kEngines{{
    {"direct", "libphoenix direct engine: GPU memory mapped by phxfs.ko, O_DIRECT into it",
     make_library_engine<phx::Engine::direct>},
    {"compat", "libphoenix compat engine: GPU without the module, staged through pinned memory",
     make_library_engine<phx::Engine::compat>},
    {"cufile", "NVIDIA cuFile through libphoenix's cufile engine (the GDS baseline)",
     make_library_engine<phx::Engine::cufile>},
    {"posix", "plain pread/pwrite into a host buffer, then cudaMemcpy to the GPU if there is one",
     make_posix_engine},
    {"host", "libphoenix host engine: the library's I/O path into registered host memory",
     make_library_engine<phx::Engine::host>},
}};

}  // namespace

std::span<const EngineEntry> engine_table() noexcept {
  return kEngines;
}

const EngineEntry *find_engine(std::string_view name) {
  const std::string canonical = phxtools::canonical_engine(name);
  for (const EngineEntry &entry : kEngines) {
    if (entry.name == canonical) {
      return &entry;
    }
  }
  return nullptr;
}

}  // namespace phxbench
