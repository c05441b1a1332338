// SPDX-License-Identifier: MIT
#include "buffer.hpp"

#include <cerrno>
#include <string>
#include <system_error>
#include <vector>

namespace py = pybind11;

namespace phx::python {
namespace {

[[noreturn]] void not_contiguous(const char *how) {
  throw std::system_error(EINVAL, std::system_category(),
                          std::string("buffer: ") + how + " is not C-contiguous");
}

}  // namespace

Buffer::Buffer(const py::handle &object, bool writable) {
  if (PyCapsule_CheckExact(object.ptr()) != 0 || py::hasattr(object, "__dlpack__")) {
    if (from_dlpack(object)) {
      return;
    }
  }
  if (py::hasattr(object, "__cuda_array_interface__")) {
    if (from_cuda_array_interface(object)) {
      if (writable && readonly_) {
        throw py::value_error("buffer: the CUDA array is read-only, and this call writes into it");
      }
      return;
    }
  }
  if (from_buffer_protocol(object, writable)) {
    return;
  }
  throw py::type_error(
      "buffer: expected an object with __dlpack__, __cuda_array_interface__ "
      "or the buffer protocol (numpy, torch, cupy, bytearray...), got " +
      std::string(py::str(py::type::of(object).attr("__name__"))));
}

Buffer::~Buffer() {
  if (view_) {
    PyBuffer_Release(view_.get());
  }
}

// False when the producer refuses (numpy will not export a read-only array
// through DLPack): the buffer protocol may still take it.
bool Buffer::from_dlpack(const py::handle &object) {
  py::object capsule;
  if (PyCapsule_CheckExact(object.ptr()) != 0) {
    capsule = py::reinterpret_borrow<py::object>(object);
  } else {
    try {
      capsule = object.attr("__dlpack__")();
    } catch (py::error_already_set &e) {
      if (e.matches(PyExc_BufferError) || e.matches(PyExc_TypeError)) {
        return false;
      }
      throw;
    }
  }
  dlpack_ = std::make_unique<BorrowedTensor>(capsule.release().ptr());
  const DLDevice device = dlpack_->device();
  if (device.device_type == kDLCUDA) {
    place_ = {true, device.device_id};
  } else if (device.device_type != kDLCPU && device.device_type != kDLCUDAHost) {
    throw std::system_error(ENOTSUP, std::system_category(),
                            "buffer: DLPack device type " + std::to_string(device.device_type) +
                                " is neither CPU nor CUDA");
  }
  data_ = dlpack_->data();
  nbytes_ = dlpack_->nbytes();
  return true;
}

bool Buffer::from_cuda_array_interface(const py::handle &object) {
  const auto cai = object.attr("__cuda_array_interface__").cast<py::dict>();
  const auto data = cai["data"].cast<py::tuple>();
  const auto typestr = cai["typestr"].cast<std::string>();
  const std::size_t itemsize = typestr.size() > 2 ? std::stoul(typestr.substr(2)) : 0;
  std::size_t elements = 1;
  std::vector<std::size_t> shape;
  for (const py::handle d : cai["shape"]) {
    shape.push_back(d.cast<std::size_t>());
    elements *= shape.back();
  }
  if (cai.contains("strides") && !cai["strides"].is_none()) {
    std::size_t expected = itemsize;
    const auto strides = cai["strides"].cast<py::tuple>();
    for (std::size_t i = shape.size(); i-- > 0;) {
      if (shape[i] > 1 && strides[i].cast<std::size_t>() != expected) {
        not_contiguous("the CUDA array");
      }
      expected *= shape[i];
    }
  }
  data_ = reinterpret_cast<std::byte *>(data[0].cast<std::uintptr_t>());  // NOLINT
  nbytes_ = elements * itemsize;
  place_.cuda = true;
  if (py::hasattr(object, "__dlpack_device__")) {
    place_.ordinal = object.attr("__dlpack_device__")().cast<py::tuple>()[1].cast<int>();
  } else if (py::hasattr(object, "device") && py::hasattr(object.attr("device"), "id")) {
    place_.ordinal = object.attr("device").attr("id").cast<int>();
  }
  readonly_ = data[1].cast<bool>();
  return true;
}

bool Buffer::from_buffer_protocol(const py::handle &object, bool writable) {
  if (PyObject_CheckBuffer(object.ptr()) == 0) {
    return false;
  }
  auto view = std::make_unique<Py_buffer>();
  const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), view.get(), flags) != 0) {
    PyErr_Clear();
    if (PyObject_GetBuffer(object.ptr(), view.get(), PyBUF_C_CONTIGUOUS) == 0) {
      PyBuffer_Release(view.get());
      throw py::value_error("buffer: the object is read-only, and this call writes into it");
    }
    PyErr_Clear();
    not_contiguous("the buffer");
  }
  data_ = static_cast<std::byte *>(view->buf);
  nbytes_ = static_cast<std::size_t>(view->len);
  view_ = std::move(view);
  return true;
}

}  // namespace phx::python
