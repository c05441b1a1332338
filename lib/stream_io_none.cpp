// SPDX-License-Identifier: MIT
// Builds without CUDA: stream-ordered I/O is not available.
#include <cerrno>

#include "error.hpp"
#include "stream_io.hpp"

namespace phx::detail {

void submit_stream_ordered(StreamRequest /*request*/, CUstream_st * /*stream*/) {
  throw_errno(ENOTSUP, "stream-ordered I/O needs a libphoenix built with CUDA (PHX_WITH_CUDA)");
}

}  // namespace phx::detail
