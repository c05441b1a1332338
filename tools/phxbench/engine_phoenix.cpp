// SPDX-License-Identifier: MIT
// phoenix: libphoenix's direct engine.  GPU memory is registered through
// phxfs.ko, whose device pages the kernel DMAs into with plain O_DIRECT I/O.
#include "engine_libphoenix.hpp"

namespace phxbench {

std::unique_ptr<Engine> make_phoenix_engine(const Options &options) {
  return make_libphoenix_engine(options, "phoenix", "direct", BufferMemory::gpu);
}

}  // namespace phxbench
