// SPDX-License-Identifier: MIT
// cuFileRead / cuFileWrite.
#include <cerrno>
#include <cstdint>
#include <limits>
#include <string>

#include "cufile_shim/cufile_abi.h"
#include "cufile_shim/errors.hpp"
#include "cufile_shim/io.hpp"
#include "cufile_shim/shim_state.hpp"

namespace phx::cufile_shim {
namespace {

ssize_t op_failure(CUfileOpError code) {
  return -static_cast<ssize_t>(code);
}

/// Errors of the file and of the memory behind a registration: which are
/// cuFile's own codes and which are errno.
ssize_t io_failure(int err) {
  switch (err) {
    case EFAULT:  // the registered memory is gone (cudaFree behind our back)
      return op_failure(CU_FILE_CUDA_POINTER_INVALID);
    case ENODEV:
      return op_failure(CU_FILE_DEVICE_NOT_FOUND);
    case ENOTSUP:
      return op_failure(CU_FILE_IO_NOT_SUPPORTED);
    default:
      errno = err;
      return -1;
  }
}

}  // namespace

ssize_t transfer(bool is_write, void *fh, const void *base, std::size_t size, off_t file_offset,
                 off_t buf_offset) noexcept {
  const char *call = is_write ? "cuFileWrite" : "cuFileRead";
  clear_last_error();
  try {
    Shim &shim = Shim::get();
    shim.ensure_open();
    auto handle = shim.handle(fh);
    if (base == nullptr || file_offset < 0 || buf_offset < 0 ||
        size > static_cast<std::size_t>(std::numeric_limits<ssize_t>::max())) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null buffer, negative offset or size too large");
    }
    if (size == 0) {
      return 0;
    }
    const auto *target_address = static_cast<const std::byte *>(base) + buf_offset;
    Target t = shim.resolve(target_address, size);
    const auto offset = static_cast<std::uint64_t>(file_offset);
    const std::size_t done = is_write ? handle->file().write(*t.reg, t.offset, size, offset)
                                      : handle->file().read(*t.reg, t.offset, size, offset);
    return static_cast<ssize_t>(done);
  } catch (const phx::IoError &e) {
    set_last_error(std::string(call) + ": " + e.what());
    if (e.bytes_done() > 0) {
      return static_cast<ssize_t>(e.bytes_done());  // POSIX short count
    }
    return io_failure(e.code().value());
  } catch (const ShimError &e) {
    set_last_error(std::string(call) + ": " + e.what());
    return op_failure(e.code());
  } catch (const std::system_error &e) {
    set_last_error(std::string(call) + ": " + e.what());
    return io_failure(e.code().value());
  } catch (const std::exception &e) {
    set_last_error(std::string(call) + ": " + e.what());
    return op_failure(CU_FILE_INTERNAL_ERROR);
  } catch (...) {
    return op_failure(CU_FILE_INTERNAL_ERROR);
  }
}

}  // namespace phx::cufile_shim

ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset,
                   off_t bufPtr_offset) {
  return phx::cufile_shim::transfer(false, fh, bufPtr_base, size, file_offset, bufPtr_offset);
}

ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset,
                    off_t bufPtr_offset) {
  return phx::cufile_shim::transfer(true, fh, bufPtr_base, size, file_offset, bufPtr_offset);
}
