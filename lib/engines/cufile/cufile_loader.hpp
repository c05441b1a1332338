// SPDX-License-Identifier: MIT
// libcufile (NVIDIA GPUDirect Storage), loaded with dlopen for the cuFile
// baseline engine.  The types and entry points are declared here from
// NVIDIA's documented cuFile API; nothing in the build needs cufile.h or
// libcufile, and a machine without them reports ENOTSUP when asked.
#ifndef PHOENIX_LIB_CUFILE_LOADER_HPP
#define PHOENIX_LIB_CUFILE_LOADER_HPP

#include <sys/types.h>

#include <cstddef>
#include <ctime>
#include <string>

struct CUstream_st;

namespace phx::detail::cufile {

/// CUfileError_t: a cuFile status (5000 + n) and a CUDA driver status.
struct Error {
  int err = 0;
  int cu_err = 0;
};

using Handle = void *;       // CUfileHandle_t
using BatchHandle = void *;  // CUfileBatchHandle_t

inline constexpr int kHandleTypeOpaqueFd = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD

/// CUfileDescr_t
struct Descr {
  int type = kHandleTypeOpaqueFd;
  union {
    int fd;
    void *handle;
  } handle{};
  const void *fs_ops = nullptr;
};

inline constexpr int kOpRead = 0;             // CUFILE_READ
inline constexpr int kOpWrite = 1;            // CUFILE_WRITE
inline constexpr int kBatchMode = 1;          // CUFILE_BATCH
inline constexpr int kStatusComplete = 0x10;  // CUFILE_COMPLETE
inline constexpr int kStatusFailed = 0x40;    // CUFILE_FAILED

/// CUfileIOParams_t
struct IoParams {
  int mode = kBatchMode;
  struct {
    void *dev_ptr_base;
    off_t file_offset;
    off_t dev_ptr_offset;
    std::size_t size;
  } batch{};
  Handle fh = nullptr;
  int opcode = kOpRead;
  void *cookie = nullptr;
};

/// CUfileIOEvents_t
struct IoEvent {
  void *cookie = nullptr;
  int status = 0;
  std::size_t ret = 0;
};

struct Library {
  Error (*DriverOpen)() = nullptr;                                       // cuFileDriverOpen
  Error (*DriverClose)() = nullptr;                                      // cuFileDriverClose_v2
  Error (*HandleRegister)(Handle *, Descr *) = nullptr;                  // cuFileHandleRegister
  void (*HandleDeregister)(Handle) = nullptr;                            // cuFileHandleDeregister
  Error (*BufRegister)(const void *, std::size_t, int) = nullptr;        // cuFileBufRegister
  Error (*BufDeregister)(const void *) = nullptr;                        // cuFileBufDeregister
  ssize_t (*Read)(Handle, void *, std::size_t, off_t, off_t) = nullptr;  // cuFileRead
  ssize_t (*Write)(Handle, const void *, std::size_t, off_t, off_t) = nullptr;  // cuFileWrite
  Error (*BatchIOSetUp)(BatchHandle *, unsigned) = nullptr;
  Error (*BatchIOSubmit)(BatchHandle, unsigned, IoParams *, unsigned) = nullptr;
  Error (*BatchIOGetStatus)(BatchHandle, unsigned, unsigned *, IoEvent *, timespec *) = nullptr;
  void (*BatchIODestroy)(BatchHandle) = nullptr;
  Error (*ReadAsync)(Handle, void *, std::size_t *, off_t *, off_t *, ssize_t *,
                     CUstream_st *) = nullptr;  // cuFileReadAsync
  Error (*WriteAsync)(Handle, void *, std::size_t *, off_t *, off_t *, ssize_t *,
                      CUstream_st *) = nullptr;                // cuFileWriteAsync
  Error (*StreamRegister)(CUstream_st *, unsigned) = nullptr;  // cuFileStreamRegister
  Error (*StreamDeregister)(CUstream_st *) = nullptr;          // cuFileStreamDeregister
};

/// libcufile's entry points, loaded once; null with @p why when absent
/// (PHX_CUFILE_LIBRARY names another file).
[[nodiscard]] const Library *library(std::string &why) noexcept;

/// "cuFileHandleRegister: error 5027 (...)"; the cuFile codes we know by name.
[[nodiscard]] std::string error_text(const char *call, Error e);

/// Opens the cuFile driver (cuFileDriverOpen; slow: hundreds of ms) on first
/// use, for the life of the process.  Throws std::system_error: ENOTSUP
/// when libcufile is absent, EIO when the driver does not open.
const Library &driver();

}  // namespace phx::detail::cufile

#endif  // PHOENIX_LIB_CUFILE_LOADER_HPP
