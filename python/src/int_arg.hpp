// SPDX-License-Identifier: MIT
// Integer arguments from Python, checked here rather than by pybind11's
// conversion: a value out of the C++ type's range is then an OSError that
// names the argument, not "incompatible function arguments" or "Unable to
// cast Python instance".
#ifndef PHOENIX_PYTHON_INT_ARG_HPP
#define PHOENIX_PYTHON_INT_ARG_HPP

#include <pybind11/pybind11.h>

#include <cerrno>
#include <limits>
#include <string>
#include <system_error>

#include "errors.hpp"

namespace phx::python {

/// @p value as a Python int (operator.index: bool and numpy integers too);
/// TypeError naming @p what for anything else (a float, a string).
[[nodiscard]] pybind11::int_ index_arg(const pybind11::handle &value, const std::string &what);

/// str(@p value).
[[nodiscard]] std::string text(const pybind11::handle &value);

/// Whether @p value lies in [@p low, @p high].
[[nodiscard]] bool in_range(const pybind11::int_ &value, const pybind11::int_ &low,
                            const pybind11::int_ &high);

/// @p value as a T: TypeError when it is not an integer, ArgumentError (OSError(@p error) for
/// another errno) saying "@p what VALUE is out of range [MIN, MAX]" when T cannot hold it.
template <typename T>
[[nodiscard]] T int_arg(const pybind11::handle &value, const std::string &what,
                        int error = EINVAL) {
  const pybind11::int_ i = index_arg(value, what);
  const pybind11::int_ low(std::numeric_limits<T>::min());
  const pybind11::int_ high(std::numeric_limits<T>::max());
  if (!in_range(i, low, high)) {
    const std::string why =
        what + " " + text(i) + " is out of range [" + text(low) + ", " + text(high) + "]";
    if (error == EINVAL) {
      throw ArgumentError(why);
    }
    throw std::system_error(error, std::system_category(), why);
  }
  return i.cast<T>();
}

}  // namespace phx::python

#endif  // PHOENIX_PYTHON_INT_ARG_HPP
