// SPDX-License-Identifier: MIT
#include "dlpack_export.hpp"

#include <cerrno>
#include <system_error>

namespace phx::python {
namespace {

// Type codes newer than Debian's dlpack 0.6 header, from DLPack 1.x's
// DLDataTypeCode (the ABI keeps them stable).
constexpr std::uint8_t kCodeComplex = 5;
constexpr std::uint8_t kCodeBool = 6;
constexpr std::uint8_t kCodeFloat8E4M3Fn = 10;
constexpr std::uint8_t kCodeFloat8E4M3Fnuz = 11;
constexpr std::uint8_t kCodeFloat8E5M2 = 12;
constexpr std::uint8_t kCodeFloat8E5M2Fnuz = 13;
constexpr std::uint8_t kCodeFloat8E8M0Fnu = 14;
constexpr std::uint8_t kCodeFloat6E2M3Fn = 15;
constexpr std::uint8_t kCodeFloat6E3M2Fn = 16;
constexpr std::uint8_t kCodeFloat4E2M1Fn = 17;

constexpr const char *kCapsuleName = "dltensor";
constexpr const char *kUsedCapsuleName = "used_dltensor";

struct ExportContext {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  std::shared_ptr<safetensors::Allocation> owner;
};

void delete_export(DLManagedTensor *managed) {
  delete static_cast<ExportContext *>(managed->manager_ctx);  // NOLINT: owned by the capsule
}

// An unconsumed capsule still owns the tensor.
void capsule_destructor(PyObject *capsule) {
  if (PyCapsule_IsValid(capsule, kCapsuleName) != 0) {
    auto *managed = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(capsule, kCapsuleName));
    if (managed != nullptr && managed->deleter != nullptr) {
      managed->deleter(managed);
    }
  }
}

DLDataType make_type(std::uint8_t code, std::uint8_t bits) noexcept {
  DLDataType t{};
  t.code = code;
  t.bits = bits;
  t.lanes = 1;
  return t;
}

}  // namespace

DLDataType dlpack_type(safetensors::Dtype dtype) noexcept {
  using safetensors::Dtype;
  const auto bits = static_cast<std::uint8_t>(safetensors::bit_size(dtype));
  switch (dtype) {
    case Dtype::boolean:
      return make_type(kCodeBool, 8);
    case Dtype::f8_e4m3:
      return make_type(kCodeFloat8E4M3Fn, 8);
    case Dtype::f8_e5m2:
      return make_type(kCodeFloat8E5M2, 8);
    case Dtype::f8_e4m3fnuz:
      return make_type(kCodeFloat8E4M3Fnuz, 8);
    case Dtype::f8_e5m2fnuz:
      return make_type(kCodeFloat8E5M2Fnuz, 8);
    case Dtype::f8_e8m0:
      return make_type(kCodeFloat8E8M0Fnu, 8);
    case Dtype::f6_e2m3:
      return make_type(kCodeFloat6E2M3Fn, 6);
    case Dtype::f6_e3m2:
      return make_type(kCodeFloat6E3M2Fn, 6);
    case Dtype::f4:
      return make_type(kCodeFloat4E2M1Fn, 4);
    case Dtype::c64:
      return make_type(kCodeComplex, 64);
    case Dtype::bf16:
      return make_type(kDLBfloat, 16);
    case Dtype::f16:
    case Dtype::f32:
    case Dtype::f64:
      return make_type(kDLFloat, bits);
    case Dtype::i8:
    case Dtype::i16:
    case Dtype::i32:
    case Dtype::i64:
      return make_type(kDLInt, bits);
    case Dtype::u8:
    case Dtype::u16:
    case Dtype::u32:
    case Dtype::u64:
      return make_type(kDLUInt, bits);
  }
  return make_type(kDLUInt, 8);
}

PyObject *make_capsule(const TensorHandle &tensor) {
  auto context = std::make_unique<ExportContext>();
  context->owner = tensor.owner;
  if (tensor.raw_bytes) {
    context->shape = {static_cast<std::int64_t>(tensor.nbytes)};
  } else {
    context->shape = tensor.shape;
  }
  // Row-major strides in elements: explicit, as DLPack 1.0 asks of producers.
  context->strides.resize(context->shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = context->shape.size(); i-- > 0;) {
    context->strides[i] = stride;
    stride *= context->shape[i];
  }
  DLTensor &t = context->managed.dl_tensor;
  t.data = tensor.data;
  t.device.device_type = tensor.cuda ? kDLCUDA : kDLCPU;
  t.device.device_id = tensor.cuda ? tensor.cuda_ordinal : 0;
  t.ndim = static_cast<std::int32_t>(context->shape.size());
  t.dtype = tensor.raw_bytes ? make_type(kDLUInt, 8) : dlpack_type(tensor.dtype);
  t.shape = context->shape.data();
  t.strides = context->strides.data();
  t.byte_offset = 0;
  context->managed.manager_ctx = context.get();
  context->managed.deleter = delete_export;
  PyObject *capsule = PyCapsule_New(&context->managed, kCapsuleName, capsule_destructor);
  if (capsule != nullptr) {
    (void)context.release();  // the capsule (then its consumer) owns it now
  }
  return capsule;
}

BorrowedTensor::BorrowedTensor(PyObject *capsule) {
  if (PyCapsule_IsValid(capsule, kCapsuleName) == 0) {
    Py_XDECREF(capsule);
    throw std::system_error(EINVAL, std::system_category(),
                            "not an unused DLPack capsule (\"dltensor\")");
  }
  managed_ = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(capsule, kCapsuleName));
  // We are the consumer now: the capsule must not free it behind our back.
  (void)PyCapsule_SetName(capsule, kUsedCapsuleName);
  Py_DECREF(capsule);
  const DLTensor &t = managed_->dl_tensor;
  std::size_t elements = 1;
  std::int64_t expected_stride = 1;
  bool contiguous = true;
  for (std::int32_t i = t.ndim; i-- > 0;) {
    const std::int64_t extent = t.shape[i];
    if (t.strides != nullptr && extent > 1 && t.strides[i] != expected_stride) {
      contiguous = false;
    }
    expected_stride *= extent;
    elements *= static_cast<std::size_t>(extent);
  }
  if (!contiguous) {
    managed_->deleter(managed_);
    managed_ = nullptr;
    throw std::system_error(EINVAL, std::system_category(),
                            "the tensor is not contiguous (its strides are not row-major)");
  }
  nbytes_ = elements * ((static_cast<std::size_t>(t.dtype.bits) * t.dtype.lanes + 7) / 8);
  data_ = static_cast<std::byte *>(t.data) + t.byte_offset;
  device_ = t.device;
}

BorrowedTensor::~BorrowedTensor() {
  if (managed_ != nullptr && managed_->deleter != nullptr) {
    managed_->deleter(managed_);
  }
}

}  // namespace phx::python
