// SPDX-License-Identifier: MIT
// How C++ failures reach Python.  A bad value that the caller passed (a
// mode, an engine, a device, a cache policy) is phoenix_gds.ArgumentError:
// both ValueError, which is what Python's own functions raise for a bad
// value, and OSError with errno EINVAL, which is what the C API's errno
// says and what this package raised before.  Every other errno-carrying
// failure is OSError (FileNotFoundError and so on where Python has one).
#ifndef PHOENIX_PYTHON_ERRORS_HPP
#define PHOENIX_PYTHON_ERRORS_HPP

#include <pybind11/pybind11.h>

#include <string>
#include <system_error>

namespace phx::python {

/// A bad argument value; @p what names the argument and what was passed.
class ArgumentError : public std::system_error {
 public:
  explicit ArgumentError(const std::string &what);
};

/// The message given to @p error's constructor, without the errno's text
/// that std::system_error appends (once or, nested, several times).
[[nodiscard]] std::string what_arg_of(const std::system_error &error);
/// @p what with the errno's text once: std::system_error appends ": reason"
/// to its message, and a message that already ended with the reason would
/// show it twice.
[[nodiscard]] std::string message_of(const std::system_error &error);

/// Adds ArgumentError to @p m and translates std::system_error (and
/// ArgumentError) into Python exceptions.
void register_errors(pybind11::module_ &m);

}  // namespace phx::python

#endif  // PHOENIX_PYTHON_ERRORS_HPP
