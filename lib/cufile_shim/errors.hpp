// SPDX-License-Identifier: MIT
// cuFile's two error conventions: CUfileError_t from the control calls,
// and from the I/O calls a byte count, -1 with errno for a file system
// error, or -CUfileOpError.  Nothing thrown inside crosses the C ABI.
#ifndef PHOENIX_CUFILE_SHIM_ERRORS_HPP
#define PHOENIX_CUFILE_SHIM_ERRORS_HPP

#include <stdexcept>
#include <string>
#include <system_error>

#include "cufile_shim/cufile_abi.h"

namespace phx::cufile_shim {

/// A failure that has its cuFile code already (bad argument, unknown handle).
class ShimError : public std::runtime_error {
 public:
  ShimError(CUfileOpError code, const std::string &what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] CUfileOpError code() const noexcept { return code_; }

 private:
  CUfileOpError code_;
};

[[nodiscard]] inline CUfileError_t status(CUfileOpError err) noexcept {
  return {err, 0};
}

/// The cuFile code for a libphoenix errno outside the I/O path
/// (registration, opening a device or a file).
[[nodiscard]] CUfileOpError op_error_from_errno(int err) noexcept;

/// The errno closest to a cuFile code (libphxfile's negative errno returns).
[[nodiscard]] int errno_from_op_error(CUfileOpError code) noexcept;

/// Remembers why the calling thread's last call failed (phx_cufile_last_error).
void set_last_error(const std::string &what) noexcept;
void clear_last_error() noexcept;

/// Runs @p body, which returns a CUfileError_t, and turns whatever it
/// throws into one.
template <typename Body>
CUfileError_t guarded(const char *call, Body &&body) noexcept {
  clear_last_error();
  try {
    return body();
  } catch (const ShimError &e) {
    set_last_error(std::string(call) + ": " + e.what());
    return status(e.code());
  } catch (const std::system_error &e) {
    set_last_error(std::string(call) + ": " + e.what());
    return status(op_error_from_errno(e.code().value()));
  } catch (const std::exception &e) {
    set_last_error(std::string(call) + ": " + e.what());
    return status(CU_FILE_INTERNAL_ERROR);
  } catch (...) {
    set_last_error(std::string(call) + ": unknown exception");
    return status(CU_FILE_INTERNAL_ERROR);
  }
}

}  // namespace phx::cufile_shim

#endif  // PHOENIX_CUFILE_SHIM_ERRORS_HPP
