// SPDX-License-Identifier: MIT
// phx::Options for Python.
#ifndef PHOENIX_PYTHON_OPTIONS_HPP
#define PHOENIX_PYTHON_OPTIONS_HPP

#include <pybind11/pybind11.h>

namespace phx::python {

/// Adds Options to @p m.  Bind it before anything whose signature takes one.
void bind_options(pybind11::module_ &m);

}  // namespace phx::python

#endif  // PHOENIX_PYTHON_OPTIONS_HPP
