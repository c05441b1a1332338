// SPDX-License-Identifier: MIT
// gds: NVIDIA cuFile, the paper's baseline, through libphoenix's cufile
// engine (libcufile loaded at run time).  Unavailable when this libphoenix
// has no cufile engine or the machine has no libcufile.
#include "engine_libphoenix.hpp"

namespace phxbench {

std::unique_ptr<Engine> make_gds_engine(const Options &options) {
  return make_libphoenix_engine(options, "gds", "cufile", BufferMemory::gpu);
}

}  // namespace phxbench
