// SPDX-License-Identifier: MIT
// cuFileHandleRegister/Deregister and cuFileBufRegister/Deregister.
#include "cufile_shim/cufile_abi.h"
#include "cufile_shim/errors.hpp"
#include "cufile_shim/shim_state.hpp"

using phx::cufile_shim::guarded;
using phx::cufile_shim::Shim;
using phx::cufile_shim::ShimError;
using phx::cufile_shim::status;

CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr) {
  return guarded("cuFileHandleRegister", [fh, descr] {
    if (fh == nullptr || descr == nullptr) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null handle or descriptor");
    }
    if (descr->type == CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 ||
        descr->type == CU_FILE_HANDLE_TYPE_USERSPACE_FS) {
      throw ShimError(CU_FILE_IO_NOT_SUPPORTED,
                      "only file descriptors (CU_FILE_HANDLE_TYPE_OPAQUE_FD) are served");
    }
    if (descr->type != CU_FILE_HANDLE_TYPE_OPAQUE_FD) {
      throw ShimError(CU_FILE_INVALID_VALUE, "unknown handle type");
    }
    Shim &shim = Shim::get();
    shim.ensure_open();
    *fh = shim.add_handle(descr->handle.fd);
    return status(CU_FILE_SUCCESS);
  });
}

void cuFileHandleDeregister(CUfileHandle_t fh) {
  try {
    (void)Shim::get().remove_handle(fh);
  } catch (...) {  // nothing to report through a void function
  }
}

CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int /*flags*/) {
  return guarded("cuFileBufRegister", [bufPtr_base, length] {
    Shim &shim = Shim::get();
    shim.ensure_open();
    shim.register_buffer(bufPtr_base, length);
    return status(CU_FILE_SUCCESS);
  });
}

CUfileError_t cuFileBufDeregister(const void *bufPtr_base) {
  return guarded("cuFileBufDeregister", [bufPtr_base] {
    Shim::get().deregister_buffer(bufPtr_base);
    return status(CU_FILE_SUCCESS);
  });
}
