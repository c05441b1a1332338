// SPDX-License-Identifier: MIT
#include "errors.hpp"

#include <Python.h>

#include <cerrno>
#include <exception>

namespace py = pybind11;

namespace phx::python {

ArgumentError::ArgumentError(const std::string &what)
    : std::system_error(EINVAL, std::system_category(), what) {}

std::string what_arg_of(const std::system_error &error) {
  std::string text = error.what();
  const std::string suffix = ": " + error.code().message();
  while (text.ends_with(suffix)) {
    text.resize(text.size() - suffix.size());
  }
  return text;
}

std::string message_of(const std::system_error &error) {
  return what_arg_of(error) + ": " + error.code().message();
}

namespace {

// Owned by the module (its attribute); set once at import.
PyObject *argument_error_type = nullptr;

void raise(PyObject *type, const std::system_error &e) {
  const py::object error =
      py::reinterpret_borrow<py::object>(type)(e.code().value(), message_of(e));
  PyErr_SetObject(type, error.ptr());
}

}  // namespace

void register_errors(py::module_ &m) {
  PyObject *bases = PyTuple_Pack(2, PyExc_OSError, PyExc_ValueError);
  if (bases == nullptr) {
    throw py::error_already_set();
  }
  argument_error_type = PyErr_NewExceptionWithDoc(
      "phoenix_gds.ArgumentError",
      "A bad argument value: both ValueError and OSError with errno EINVAL.", bases, nullptr);
  Py_DECREF(bases);
  if (argument_error_type == nullptr) {
    throw py::error_already_set();
  }
  m.attr("ArgumentError") = py::reinterpret_steal<py::object>(argument_error_type);

  // NOLINTNEXTLINE(performance-unnecessary-value-param): pybind11 fixes the signature
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) {
        std::rethrow_exception(p);
      }
    } catch (const ArgumentError &e) {
      raise(argument_error_type, e);
    } catch (const std::system_error &e) {
      // OSError(errno, text) picks the subclass (FileNotFoundError...).
      const py::object error =
          py::module_::import("builtins").attr("OSError")(e.code().value(), message_of(e));
      PyErr_SetObject(PyExc_OSError, error.ptr());
    }
  });
}

}  // namespace phx::python
