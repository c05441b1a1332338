// SPDX-License-Identifier: MIT
// Device, Registration and File for Python: the I/O face of the package.
#ifndef PHOENIX_PYTHON_IO_HPP
#define PHOENIX_PYTHON_IO_HPP

#include <pybind11/pybind11.h>

#include <string>

#include "phoenix/phoenix.hpp"

namespace phx::python {

/// "cpu" -> host engine on device 0; "cuda" / "cuda:N" -> the Phoenix device
/// whose GPU is CUDA ordinal N (what torch calls cuda:N).
struct Target {
  bool cuda = false;
  int device = 0;
  int ordinal = 0;
};

/// Throws ArgumentError naming a malformed @p device.
[[nodiscard]] Target parse_target(const std::string &device);
/// A device as callers name it: "cpu", "cuda", "cuda:N", an integer N
/// (CUDA ordinal N, as torch and safetensors take it) or an object whose
/// str() is one of those (torch.device).  ArgumentError for anything else.
[[nodiscard]] std::string device_name(const pybind11::handle &device);
/// An engine name ("auto", "direct", "compat", "cufile", "host");
/// ArgumentError naming @p what for anything else.
[[nodiscard]] phx::Engine engine_arg(const pybind11::handle &engine, const std::string &what);
/// The Phoenix device id of CUDA ordinal @p ordinal; ENODEV when none.
[[nodiscard]] int device_for_ordinal(int ordinal);

/// Adds Device, Registration and File to @p m.
void bind_io(pybind11::module_ &m);

}  // namespace phx::python

#endif  // PHOENIX_PYTHON_IO_HPP
