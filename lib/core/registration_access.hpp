// SPDX-License-Identifier: MIT
// The library's own way to a Registration's mapping (the public class
// keeps it private).
#ifndef PHOENIX_LIB_REGISTRATION_ACCESS_HPP
#define PHOENIX_LIB_REGISTRATION_ACCESS_HPP

#include "core/mapping.hpp"
#include "phoenix/phoenix.hpp"

namespace phx::detail {

struct RegistrationAccess {
  [[nodiscard]] static const Mapping *mapping(const Registration &r) noexcept {
    return r.mapping_.get();
  }
  [[nodiscard]] static const DeviceState *device(const Registration &r) noexcept {
    return r.device_.get();
  }
};

}  // namespace phx::detail

#endif  // PHOENIX_LIB_REGISTRATION_ACCESS_HPP
