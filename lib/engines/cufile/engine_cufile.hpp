// SPDX-License-Identifier: MIT
// The cuFile baseline engine's extra entry points: cuFile's batch and stream
// APIs, for benchmarks and the GPU suite's agreement checks.
#ifndef PHOENIX_LIB_ENGINE_CUFILE_HPP
#define PHOENIX_LIB_ENGINE_CUFILE_HPP

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "engines/engine_backend.hpp"
#include "io/aligned_io.hpp"

struct CUstream_st;

namespace phx::detail {

[[nodiscard]] std::unique_ptr<EngineBackend> make_cufile_backend(int device_id);

struct CufilePiece {
  std::size_t buffer_offset = 0;  ///< from the registered base
  std::uint64_t file_offset = 0;
  std::size_t size = 0;
};

/// Runs @p pieces through cuFileBatchIOSetUp/Submit/GetStatus on @p fd
/// against the registration @p mapping of a cufile device.  Returns the
/// bytes of all pieces, or the first failure.  Throws std::system_error
/// (ENOTSUP when the batch API is missing).
[[nodiscard]] TransferResult cufile_batch(EngineBackend &backend, Direction dir, int fd,
                                          const Mapping &mapping,
                                          std::span<const CufilePiece> pieces);

/// cuFileReadAsync/WriteAsync on @p stream (registered with
/// cuFileStreamRegister on first use).  The parameters are read when the
/// stream reaches the operation, so they live in @p params, which the caller
/// keeps until the stream is synchronised.
struct CufileAsyncParams {
  std::size_t size = 0;
  off_t file_offset = 0;
  off_t buffer_offset = 0;
  ssize_t bytes_done = 0;
};
void cufile_submit_async(EngineBackend &backend, Direction dir, int fd, const Mapping &mapping,
                         CufileAsyncParams &params, CUstream_st *stream);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_ENGINE_CUFILE_HPP
