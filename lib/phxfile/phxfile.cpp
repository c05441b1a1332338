// SPDX-License-Identifier: MIT
// libphxfile.so: LMCache's phxFile ABI (include/phoenix/phxfile.h) over the
// cuFile shim's state (lib/cufile_shim/shim_state.hpp): the same handles,
// buffer registry, pointer-to-device resolution and stream-ordered I/O as
// libcufile.so.0, with the phx conventions at the edge: 0 or a negative
// errno, never an exception or a cuFile status.
#include "phoenix/phxfile.h"

#include <fcntl.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <system_error>
#include <type_traits>

#include "cufile_shim/errors.hpp"
#include "cufile_shim/shim_state.hpp"

// The ABI's int64_t offsets and byte counts are libphoenix's off_t and
// ssize_t on the LP64 systems it runs on.
static_assert(sizeof(std::int64_t) == sizeof(off_t) && std::is_signed_v<off_t>);
static_assert(sizeof(std::int64_t) == sizeof(ssize_t) && std::is_signed_v<ssize_t>);

extern "C" const char *phx_cufile_last_error(void);

namespace {

using phx::cufile_shim::clear_last_error;
using phx::cufile_shim::errno_from_op_error;
using phx::cufile_shim::set_last_error;
using phx::cufile_shim::Shim;
using phx::cufile_shim::ShimError;

int failed(const char *call, int err, const std::string &what) noexcept {
  set_last_error(std::string(call) + ": " + what);
  return -(err > 0 ? err : EIO);
}

/// Runs @p body (which returns 0) and turns what it throws into -errno.
template <typename Body>
int guarded(const char *call, Body &&body) noexcept {
  clear_last_error();
  try {
    return body();
  } catch (const ShimError &e) {
    return failed(call, errno_from_op_error(e.code()), e.what());
  } catch (const std::system_error &e) {
    return failed(call, e.code().value(), e.what());
  } catch (const std::bad_alloc &) {
    return failed(call, ENOMEM, "out of memory");
  } catch (const std::exception &e) {
    return failed(call, EIO, e.what());
  } catch (...) {
    return failed(call, EIO, "unknown exception");
  }
}

int submit(const char *call, bool is_write, void *fh, void *base, const std::size_t *nbytes,
           const std::int64_t *file_offset, const std::int64_t *buf_offset,
           std::int64_t *bytes_done, void *stream) noexcept {
  return guarded(call, [&] {
    if (base == nullptr || nbytes == nullptr || file_offset == nullptr || buf_offset == nullptr ||
        bytes_done == nullptr) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null pointer argument");
    }
    if (*file_offset < 0 || *buf_offset < 0) {
      throw ShimError(CU_FILE_INVALID_VALUE, "negative offset (file " +
                                                 std::to_string(*file_offset) + ", buffer " +
                                                 std::to_string(*buf_offset) + ")");
    }
    Shim &shim = Shim::get();
    shim.ensure_open();
    auto handle = shim.handle(fh);
    const std::size_t size = *nbytes;
    const auto *target = static_cast<const std::byte *>(base) + *buf_offset;
    const phx::cufile_shim::Target t = shim.resolve(target, size == 0 ? 1 : size);
    const auto offset = static_cast<std::uint64_t>(*file_offset);
    auto *done = reinterpret_cast<ssize_t *>(bytes_done);  // same type on LP64 (above)
    auto *cu_stream = static_cast<CUstream>(stream);
    if (is_write) {
      handle->file().write_async(*t.reg, t.offset, size, offset, done, cu_stream);
    } else {
      handle->file().read_async(*t.reg, t.offset, size, offset, done, cu_stream);
    }
    return 0;
  });
}

}  // namespace

extern "C" {

int phxFileDriverOpen(void) {
  return guarded("phxFileDriverOpen", [] {
    Shim::get().open();
    return 0;
  });
}

int phxFileDriverClose(void) {
  return guarded("phxFileDriverClose", [] {
    Shim &shim = Shim::get();
    if (shim.use_count() > 1) {
      (void)shim.close();
    } else {
      shim.reset();
    }
    return 0;
  });
}

int phxFileBufRegister(const void *addr, size_t length) {
  return guarded("phxFileBufRegister", [&] {
    Shim &shim = Shim::get();
    shim.ensure_open();
    shim.register_buffer(addr, length);
    return 0;
  });
}

int phxFileBufDeregister(const void *addr) {
  return guarded("phxFileBufDeregister", [&] {
    Shim::get().deregister_buffer(addr);
    return 0;
  });
}

int phxFileHandleRegister(void **fh, int fd) {
  return guarded("phxFileHandleRegister", [&] {
    if (fh == nullptr) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null handle pointer");
    }
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
    if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
      throw std::system_error(EBADF, std::system_category(),
                              "descriptor " + std::to_string(fd) + " is not open");
    }
    Shim &shim = Shim::get();
    shim.ensure_open();
    *fh = shim.add_handle(fd);
    return 0;
  });
}

int phxFileHandleDeregister(void *fh) {
  return guarded("phxFileHandleDeregister", [&] {
    if (!Shim::get().remove_handle(fh)) {
      throw ShimError(CU_FILE_HANDLE_NOT_REGISTERED, "file handle is not registered");
    }
    return 0;
  });
}

int phxFileStreamRegister(void * /*stream*/) {
  clear_last_error();
  return 0;
}

int phxFileStreamDeregister(void * /*stream*/) {
  clear_last_error();
  return 0;
}

int phxFileReadAsync(void *fh, void *buf_base, size_t *nbytes, int64_t *file_offset,
                     int64_t *buf_offset, int64_t *bytes_done, void *stream) {
  return submit("phxFileReadAsync", false, fh, buf_base, nbytes, file_offset, buf_offset,
                bytes_done, stream);
}

int phxFileWriteAsync(void *fh, void *buf_base, size_t *nbytes, int64_t *file_offset,
                      int64_t *buf_offset, int64_t *bytes_done, void *stream) {
  return submit("phxFileWriteAsync", true, fh, buf_base, nbytes, file_offset, buf_offset,
                bytes_done, stream);
}

const char *phxFileLastError(void) {
  return phx_cufile_last_error();
}

}  // extern "C"
