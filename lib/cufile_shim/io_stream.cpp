// SPDX-License-Identifier: MIT
// cuFileReadAsync / cuFileWriteAsync on libphoenix's stream-ordered I/O,
// and cuFileStreamRegister/Deregister.
//
// cuFile may read *size_p, *file_offset_p and *bufPtr_offset_p when the
// stream reaches the operation; libphoenix takes the values at submission,
// so the shim reads them when called (as cuFile does for a stream
// registered with all of CU_FILE_STREAM_FIXED_*).
#include <cstdint>

#include "cufile_shim/cufile_abi.h"
#include "cufile_shim/errors.hpp"
#include "cufile_shim/shim_state.hpp"

using phx::cufile_shim::guarded;
using phx::cufile_shim::Shim;
using phx::cufile_shim::ShimError;
using phx::cufile_shim::status;

namespace {

CUfileError_t submit(const char *call, bool is_write, CUfileHandle_t fh, void *base,
                     const size_t *size_p, const off_t *file_offset_p, const off_t *buf_offset_p,
                     ssize_t *bytes_p, CUstream stream) {
  return guarded(call, [=] {
    if (base == nullptr || size_p == nullptr || file_offset_p == nullptr ||
        buf_offset_p == nullptr || bytes_p == nullptr || *file_offset_p < 0 || *buf_offset_p < 0) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null pointer or negative offset");
    }
    Shim &shim = Shim::get();
    shim.ensure_open();
    auto handle = shim.handle(fh);
    const std::size_t size = *size_p;
    const auto *target_address = static_cast<const std::byte *>(base) + *buf_offset_p;
    phx::cufile_shim::Target t = shim.resolve(target_address, size == 0 ? 1 : size);
    const auto offset = static_cast<std::uint64_t>(*file_offset_p);
    try {
      if (is_write) {
        handle->file().write_async(*t.reg, t.offset, size, offset, bytes_p, stream);
      } else {
        handle->file().read_async(*t.reg, t.offset, size, offset, bytes_p, stream);
      }
    } catch (const std::system_error &e) {
      if (e.code().value() == ENOTSUP) {
        throw ShimError(CU_FILE_ASYNC_NOT_SUPPORTED, e.what());
      }
      throw;
    }
    return status(CU_FILE_SUCCESS);
  });
}

}  // namespace

CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
                              off_t *file_offset_p, off_t *bufPtr_offset_p, ssize_t *bytes_read_p,
                              CUstream stream) {
  return submit("cuFileReadAsync", false, fh, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p,
                bytes_read_p, stream);
}

CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
                               off_t *file_offset_p, off_t *bufPtr_offset_p,
                               ssize_t *bytes_written_p, CUstream stream) {
  return submit("cuFileWriteAsync", true, fh, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p,
                bytes_written_p, stream);
}

CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags) {
  return guarded("cuFileStreamRegister", [stream, flags] {
    Shim::get().register_stream(stream, flags);
    return status(CU_FILE_SUCCESS);
  });
}

CUfileError_t cuFileStreamDeregister(CUstream stream) {
  return guarded("cuFileStreamDeregister", [stream] {
    Shim::get().deregister_stream(stream);
    return status(CU_FILE_SUCCESS);
  });
}
