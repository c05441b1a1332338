// SPDX-License-Identifier: MIT
#include <array>

#include "engine.hpp"

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

constexpr std::array<EngineEntry, 5> kEngines{{
    {"phoenix", "libphoenix direct engine: GPU memory mapped by phxfs.ko, O_DIRECT into it",
     make_phoenix_engine},
    {"compat", "libphoenix compat engine: GPU without the module, staged through pinned memory",
     make_compat_engine},
    {"gds", "NVIDIA cuFile through libphoenix's cufile engine (the GDS baseline)", make_gds_engine},
    {"posix", "plain pread/pwrite into a host buffer, then cudaMemcpy to the GPU if there is one",
     make_posix_engine},
    {"host", "libphoenix host engine: the library's I/O path into registered host memory",
     make_host_engine},
}};

}  // namespace

std::span<const EngineEntry> engine_table() noexcept {
  return kEngines;
}

const EngineEntry *find_engine(std::string_view name) noexcept {
  for (const EngineEntry &entry : kEngines) {
    if (entry.name == name) {
      return &entry;
    }
  }
  return nullptr;
}

}  // namespace phxbench
