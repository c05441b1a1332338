// SPDX-License-Identifier: MIT
// One synchronous transfer, shared by cuFileRead/cuFileWrite and the batch
// workers.
#ifndef PHOENIX_CUFILE_SHIM_IO_HPP
#define PHOENIX_CUFILE_SHIM_IO_HPP

#include <sys/types.h>

#include <cstddef>

namespace phx::cufile_shim {

/// cuFileRead/cuFileWrite's result: bytes done (short only at end of file,
/// or when an error stopped the transfer after some bytes), -1 with errno
/// set for a file system error, or -CUfileOpError.
[[nodiscard]] ssize_t transfer(bool is_write, void *fh, const void *base, std::size_t size,
                               off_t file_offset, off_t buf_offset) noexcept;

}  // namespace phx::cufile_shim

#endif  // PHOENIX_CUFILE_SHIM_IO_HPP
