// SPDX-License-Identifier: MIT
// compat: libphoenix's engine for a CUDA GPU without the phxfs module (I/O
// staged through pinned host buffers and copied to the GPU).
#include "engine_libphoenix.hpp"

namespace phxbench {

std::unique_ptr<Engine> make_compat_engine(const Options &options) {
  return make_libphoenix_engine(options, "compat", "compat", BufferMemory::gpu);
}

}  // namespace phxbench
