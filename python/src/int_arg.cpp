// SPDX-License-Identifier: MIT
#include "int_arg.hpp"

#include <Python.h>

namespace py = pybind11;

namespace phx::python {

py::int_ index_arg(const py::handle &value, const std::string &what) {
  PyObject *index = PyNumber_Index(value.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    throw py::type_error(what + ": expected an integer, got " +
                         std::string(py::str(value.get_type().attr("__name__"))));
  }
  return py::reinterpret_steal<py::int_>(index);
}

std::string text(const py::handle &value) {
  return std::string(py::str(value));
}

bool in_range(const py::int_ &value, const py::int_ &low, const py::int_ &high) {
  return value >= low && value <= high;
}

}  // namespace phx::python
