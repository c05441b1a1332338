// SPDX-License-Identifier: MIT
// Stream-ordered I/O (phxfs_read_async/phxfs_write_async, File::read_async).
//
// The paper runs each I/O inside cudaLaunchHostFunc: the stream stalls for
// the whole I/O and CUDA's single callback thread runs the I/Os of all
// streams one after another.  Here the caller's thread only enqueues, on
// the stream, an event record (marks "prior work done") and a
// cuStreamWaitValue32 on a flag in pinned host memory.  An I/O thread waits
// for the event, runs the transfer through the device's engine (in
// parallel chunks for compat), stores bytes_done, then the flag: the stream
// resumes exactly after the I/O, and I/Os of different streams (and
// devices) run at the same time on different threads.
#ifndef PHOENIX_LIB_STREAM_IO_HPP
#define PHOENIX_LIB_STREAM_IO_HPP

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/mapping.hpp"
#include "io/aligned_io.hpp"

struct CUstream_st;

namespace phx::detail {

class DeviceState;

struct StreamRequest {
  Direction dir = Direction::read;
  int fd = -1;
  std::shared_ptr<DeviceState> device;  // keeps the engine alive
  std::shared_ptr<Mapping> mapping;     // keeps the registration alive
  std::size_t mapping_offset = 0;
  std::size_t size = 0;
  std::uint64_t file_offset = 0;
  IoPolicy policy;
  ssize_t *bytes_done = nullptr;  // bytes moved, or -errno when nothing moved
};

/// Enqueues @p request on @p stream.  Throws std::system_error: ENOTSUP
/// without CUDA, EINVAL for a capturing or foreign stream, CUDA errors.
void submit_stream_ordered(StreamRequest request, CUstream_st *stream);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_STREAM_IO_HPP
