// SPDX-License-Identifier: MIT
// Any Python object that describes memory, as one contiguous byte range:
// DLPack (torch, cupy, jax, numpy), __cuda_array_interface__ (cupy,
// numba) or the buffer protocol (numpy, bytearray, memoryview, mmap).
#ifndef PHOENIX_PYTHON_BUFFER_HPP
#define PHOENIX_PYTHON_BUFFER_HPP

#include <pybind11/pybind11.h>

#include <Python.h>

#include <cstddef>
#include <memory>

#include "dlpack_export.hpp"

namespace phx::python {

/// Where a buffer's memory lives.
struct Place {
  bool cuda = false;
  int ordinal = 0;  ///< CUDA ordinal when cuda
  bool operator==(const Place &) const = default;
};

/// One borrowed buffer.  Keeps what describes the memory (the DLPack tensor,
/// the Py_buffer or the object) until destroyed; destroy with the GIL held.
class Buffer {
 public:
  /// @p writable: the memory will be written (a read's destination).
  /// Throws TypeError (nothing describes memory), ValueError (read-only
  /// memory as a destination), OSError EINVAL (not contiguous) or ENOTSUP
  /// (memory neither on the CPU nor on a CUDA GPU).
  Buffer(const pybind11::handle &object, bool writable);
  ~Buffer();
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  Buffer(Buffer &&) = delete;
  Buffer &operator=(Buffer &&) = delete;

  [[nodiscard]] std::byte *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t nbytes() const noexcept { return nbytes_; }
  [[nodiscard]] Place place() const noexcept { return place_; }

 private:
  bool from_dlpack(const pybind11::handle &object);
  bool from_cuda_array_interface(const pybind11::handle &object);
  bool from_buffer_protocol(const pybind11::handle &object, bool writable);

  std::byte *data_ = nullptr;
  std::size_t nbytes_ = 0;
  Place place_;
  std::unique_ptr<BorrowedTensor> dlpack_;
  std::unique_ptr<Py_buffer> view_;
  bool readonly_ = false;
};

}  // namespace phx::python

#endif  // PHOENIX_PYTHON_BUFFER_HPP
