// SPDX-License-Identifier: MIT
#include "cufile_shim/errors.hpp"

#include <cerrno>

namespace phx::cufile_shim {
namespace {

std::string &last_error_text() {
  thread_local std::string text;
  return text;
}

}  // namespace

CUfileOpError op_error_from_errno(int err) noexcept {
  switch (err) {
    case EINVAL:
    case EBADF:
      return CU_FILE_INVALID_VALUE;
    case EEXIST:
      return CU_FILE_MEMORY_ALREADY_REGISTERED;
    case EFAULT:
      return CU_FILE_CUDA_POINTER_INVALID;
    case ENOMEM:
      return CU_FILE_GPU_MEMORY_PINNING_FAILED;
    case ENODEV:
    case ENXIO:
      return CU_FILE_DEVICE_NOT_FOUND;
    case ENOTSUP:
      return CU_FILE_IO_NOT_SUPPORTED;
    case EACCES:
    case EPERM:
      return CU_FILE_PERMISSION_DENIED;
    case EPROTO:
      return CU_FILE_DRIVER_VERSION_MISMATCH;
    default:
      return CU_FILE_INTERNAL_ERROR;
  }
}

int errno_from_op_error(CUfileOpError code) noexcept {
  switch (code) {
    case CU_FILE_SUCCESS:
      return 0;
    case CU_FILE_INVALID_VALUE:
    case CU_FILE_INVALID_FILE_TYPE:
    case CU_FILE_MEMORY_NOT_REGISTERED:
      return EINVAL;
    case CU_FILE_HANDLE_NOT_REGISTERED:
      return EBADF;
    case CU_FILE_MEMORY_ALREADY_REGISTERED:
      return EEXIST;
    case CU_FILE_CUDA_POINTER_INVALID:
    case CU_FILE_CUDA_POINTER_RANGE_ERROR:
    case CU_FILE_CUDA_MEMORY_TYPE_INVALID:
      return EFAULT;
    case CU_FILE_GPU_MEMORY_PINNING_FAILED:
      return ENOMEM;
    case CU_FILE_DEVICE_NOT_FOUND:
      return ENODEV;
    case CU_FILE_IO_NOT_SUPPORTED:
    case CU_FILE_ASYNC_NOT_SUPPORTED:
    case CU_FILE_PLATFORM_NOT_SUPPORTED:
      return EOPNOTSUPP;
    case CU_FILE_PERMISSION_DENIED:
      return EACCES;
    case CU_FILE_BATCH_FULL:
      return EAGAIN;
    default:
      return EIO;
  }
}

void set_last_error(const std::string &what) noexcept {
  try {
    last_error_text() = what;
  } catch (...) {
    last_error_text().clear();
  }
}

void clear_last_error() noexcept {
  last_error_text().clear();
}

}  // namespace phx::cufile_shim

/// Not part of cuFile: why the calling thread's last cuFile call failed
/// ("" after a success).  For diagnostics and the shim's tests.
extern "C" __attribute__((visibility("default"))) const char *phx_cufile_last_error(void) {
  return phx::cufile_shim::last_error_text().c_str();
}
