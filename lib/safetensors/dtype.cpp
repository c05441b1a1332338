// SPDX-License-Identifier: MIT
// The safetensors element types, their names and sizes.
#include <array>
#include <cerrno>
#include <string>

#include "core/error.hpp"
#include "phoenix/safetensors.hpp"

namespace phx::safetensors {
namespace {

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  std::size_t bits;
};

// In safetensors' order (its Dtype enum: ascending alignment), which its
// writer sorts tensors by; all_dtypes() hands the order on.
constexpr std::array<DtypeEntry, 22> kDtypes = {{
    {Dtype::boolean, "BOOL", 8},
    {Dtype::f4, "F4", 4},
    {Dtype::f6_e2m3, "F6_E2M3", 6},
    {Dtype::f6_e3m2, "F6_E3M2", 6},
    {Dtype::u8, "U8", 8},
    {Dtype::i8, "I8", 8},
    {Dtype::f8_e5m2, "F8_E5M2", 8},
    {Dtype::f8_e4m3, "F8_E4M3", 8},
    {Dtype::f8_e8m0, "F8_E8M0", 8},
    {Dtype::f8_e4m3fnuz, "F8_E4M3FNUZ", 8},
    {Dtype::f8_e5m2fnuz, "F8_E5M2FNUZ", 8},
    {Dtype::i16, "I16", 16},
    {Dtype::u16, "U16", 16},
    {Dtype::f16, "F16", 16},
    {Dtype::bf16, "BF16", 16},
    {Dtype::i32, "I32", 32},
    {Dtype::u32, "U32", 32},
    {Dtype::f32, "F32", 32},
    {Dtype::c64, "C64", 64},
    {Dtype::f64, "F64", 64},
    {Dtype::i64, "I64", 64},
    {Dtype::u64, "U64", 64},
}};

constexpr std::array<Dtype, kDtypes.size()> kOrder = [] {
  std::array<Dtype, kDtypes.size()> order{};
  for (std::size_t i = 0; i < kDtypes.size(); ++i) {
    order.at(i) = kDtypes.at(i).dtype;
  }
  return order;
}();

const DtypeEntry *entry(Dtype dtype) noexcept {
  for (const DtypeEntry &e : kDtypes) {
    if (e.dtype == dtype) {
      return &e;
    }
  }
  return nullptr;
}

}  // namespace

std::string_view to_string(Dtype dtype) noexcept {
  const DtypeEntry *e = entry(dtype);
  return e != nullptr ? e->name : std::string_view("?");
}

std::size_t bit_size(Dtype dtype) noexcept {
  const DtypeEntry *e = entry(dtype);
  return e != nullptr ? e->bits : 0;
}

std::size_t element_size(Dtype dtype) noexcept {
  const std::size_t bits = bit_size(dtype);
  return bits % 8 == 0 ? bits / 8 : 0;
}

std::span<const Dtype> all_dtypes() noexcept {
  return kOrder;
}

Dtype parse_dtype(std::string_view name) {
  for (const DtypeEntry &e : kDtypes) {
    if (e.name == name) {
      return e.dtype;
    }
  }
  detail::throw_errno(EINVAL, "unknown dtype \"" + std::string(name) + "\"");
}

}  // namespace phx::safetensors
