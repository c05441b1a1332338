// SPDX-License-Identifier: MIT
// host: libphoenix's host engine.  The library's own registration, aligned
// I/O and io_uring paths, into registered host memory: the CPU baseline.
#include "engine_libphoenix.hpp"

namespace phxbench {

std::unique_ptr<Engine> make_host_engine(const Options &options) {
  return make_libphoenix_engine(options, "host", "host", BufferMemory::host);
}

}  // namespace phxbench
