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
  std::size_t size;
};

constexpr std::array<DtypeEntry, 15> kDtypes = {{
    {Dtype::boolean, "BOOL", 1},
    {Dtype::u8, "U8", 1},
    {Dtype::i8, "I8", 1},
    {Dtype::f8_e4m3, "F8_E4M3", 1},
    {Dtype::f8_e5m2, "F8_E5M2", 1},
    {Dtype::u16, "U16", 2},
    {Dtype::i16, "I16", 2},
    {Dtype::f16, "F16", 2},
    {Dtype::bf16, "BF16", 2},
    {Dtype::u32, "U32", 4},
    {Dtype::i32, "I32", 4},
    {Dtype::f32, "F32", 4},
    {Dtype::u64, "U64", 8},
    {Dtype::i64, "I64", 8},
    {Dtype::f64, "F64", 8},
}};

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

std::size_t element_size(Dtype dtype) noexcept {
  const DtypeEntry *e = entry(dtype);
  return e != nullptr ? e->size : 0;
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
