// SPDX-License-Identifier: MIT
// DLPack both ways: loaded tensors handed out as "dltensor" capsules, and
// any DLPack producer's memory taken as a read destination.
#ifndef PHOENIX_PYTHON_DLPACK_EXPORT_HPP
#define PHOENIX_PYTHON_DLPACK_EXPORT_HPP

#include <Python.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "phoenix/safetensors.hpp"

namespace phx::python {

/// One loaded tensor as Python sees it; shares its allocation.
struct TensorHandle {
  std::string name;
  safetensors::Dtype dtype = safetensors::Dtype::u8;
  std::vector<std::int64_t> shape;
  std::byte *data = nullptr;
  std::size_t nbytes = 0;
  bool cuda = false;
  int cuda_ordinal = -1;  ///< DLPack's device_id for CUDA
  int device = 0;         ///< Phoenix device id
  std::shared_ptr<safetensors::Allocation> owner;
  bool raw_bytes = false;  ///< exported as U8 [nbytes]
};

/// DLPack type of a safetensors dtype.
[[nodiscard]] DLDataType dlpack_type(safetensors::Dtype dtype) noexcept;

/// A new "dltensor" capsule that keeps @p tensor's memory alive until the
/// consumer calls the deleter (or the capsule dies unconsumed).
[[nodiscard]] PyObject *make_capsule(const TensorHandle &tensor);

/// Memory described by a DLPack producer, borrowed for the duration of one
/// read: the capsule is marked used and its deleter runs on destruction.
class BorrowedTensor {
 public:
  /// @p capsule: a "dltensor" capsule (new reference taken over).  Throws
  /// std::system_error (EINVAL used/invalid capsule or non-contiguous).
  explicit BorrowedTensor(PyObject *capsule);
  ~BorrowedTensor();
  BorrowedTensor(const BorrowedTensor &) = delete;
  BorrowedTensor &operator=(const BorrowedTensor &) = delete;
  BorrowedTensor(BorrowedTensor &&) = delete;
  BorrowedTensor &operator=(BorrowedTensor &&) = delete;

  [[nodiscard]] std::byte *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t nbytes() const noexcept { return nbytes_; }
  [[nodiscard]] DLDevice device() const noexcept { return device_; }

 private:
  DLManagedTensor *managed_ = nullptr;
  std::byte *data_ = nullptr;
  std::size_t nbytes_ = 0;
  DLDevice device_{};
};

}  // namespace phx::python

#endif  // PHOENIX_PYTHON_DLPACK_EXPORT_HPP
