// SPDX-License-Identifier: MIT
// The few cuFile entry points phx-cufile-bench calls, declared from NVIDIA's
// published cuFile API reference and loaded at run time with dlopen, so one
// binary measures whichever libcufile.so.0 it is pointed at: NVIDIA's or
// libphoenix-cufile (lib/cufile_shim, whose ABI header is private to it).
#ifndef PHX_TOOLS_CUFILE_BENCH_CUFILE_API_HPP
#define PHX_TOOLS_CUFILE_BENCH_CUFILE_API_HPP

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace phxcufile {

/// CUfileError_t: a CUfileOpError (0, or 5000 + n) and a CUresult.
struct Status {
  int err;
  int cu_err;
};
static_assert(sizeof(Status) == 8, "CUfileError_t is two ints");

inline constexpr int kHandleTypeOpaqueFd = 1;  ///< CU_FILE_HANDLE_TYPE_OPAQUE_FD

/// CUfileDescr_t: the handle type, a descriptor (in a union with a Windows
/// handle), and a user-space file system's operations (null here).
struct Descr {
  int type;
  union {
    int fd;
    void *handle;
  } handle;
  const void *fs_ops;
};
static_assert(sizeof(Descr) == 24, "CUfileDescr_t is 24 bytes on LP64");

using Handle = void *;

/// "CU_FILE_HANDLE_NOT_REGISTERED (5027)" for the values the reference lists.
[[nodiscard]] std::string error_name(int err);

/// One libcufile.so.0, loaded with dlopen(RTLD_NOW | RTLD_LOCAL) by the name
/// given (a bare name goes through LD_LIBRARY_PATH and the loader's cache,
/// as kvikio's does).  Throws std::runtime_error when it does not load or
/// lacks an entry point.
class Library {
 public:
  explicit Library(const std::string &name);
  Library(const Library &) = delete;
  Library &operator=(const Library &) = delete;
  Library(Library &&) = delete;
  Library &operator=(Library &&) = delete;
  ~Library();

  /// The file the loader took (from dladdr on cuFileDriverOpen).
  [[nodiscard]] const std::string &path() const noexcept { return path_; }
  /// "phoenix" when phx_cufile_last_error exists (only libphoenix-cufile
  /// has it), else "nvidia".
  [[nodiscard]] const std::string &implementation() const noexcept { return implementation_; }
  /// Microseconds dlopen took.
  [[nodiscard]] double load_us() const noexcept { return load_us_; }

  Status (*driver_open)() = nullptr;
  Status (*driver_close)() = nullptr;
  Status (*get_version)(int *version) = nullptr;
  Status (*handle_register)(Handle *fh, Descr *descr) = nullptr;
  void (*handle_deregister)(Handle fh) = nullptr;
  Status (*buf_register)(const void *base, std::size_t length, int flags) = nullptr;
  Status (*buf_deregister)(const void *base) = nullptr;
  ssize_t (*read)(Handle fh, void *base, std::size_t size, off_t file_offset,
                  off_t buf_offset) = nullptr;

 private:
  void *lib_ = nullptr;
  std::string path_;
  std::string implementation_;
  double load_us_ = 0;
};

}  // namespace phxcufile

#endif  // PHX_TOOLS_CUFILE_BENCH_CUFILE_API_HPP
