// SPDX-License-Identifier: MIT
// Which engine serves a device: the caller's explicit choice, else
// PHX_ENGINE, else detection (module present -> direct, otherwise host until
// the CUDA compat engine exists).
#include <cerrno>
#include <string>

#include "config.hpp"
#include "device_state.hpp"
#include "driver.hpp"
#include "engine_backend.hpp"
#include "error.hpp"
#include "phxfs_ioctl.h"

namespace phx {

std::string_view to_string(Engine engine) noexcept {
  switch (engine) {
    case Engine::automatic:
      return "auto";
    case Engine::direct:
      return "direct";
    case Engine::host:
      return "host";
    case Engine::compat:
      return "compat";
  }
  return "unknown";
}

Engine parse_engine(std::string_view name) {
  if (name == "auto" || name == "automatic") {
    return Engine::automatic;
  }
  if (name == "direct" || name == "phoenix") {
    return Engine::direct;
  }
  if (name == "host") {
    return Engine::host;
  }
  if (name == "compat") {
    return Engine::compat;
  }
  detail::throw_errno(
      EINVAL, "unknown engine '" + std::string(name) + "' (expected auto, direct, host or compat)");
}

EngineChoice choose_engine(int device_id, Engine requested) {
  detail::check_device_id(device_id);
  EngineChoice choice;
  if (requested != Engine::automatic) {
    choice.engine = requested;
    choice.reason = "requested by the caller";
  } else if (auto env = detail::env_string("PHX_ENGINE")) {
    choice.engine = parse_engine(*env);
    choice.reason = "PHX_ENGINE=" + std::string(*env);
  }
  if (choice.engine == Engine::automatic || choice.reason.empty()) {
    std::string why;
    if (detail::direct_available(device_id, why)) {
      choice.engine = Engine::direct;
      choice.reason = "auto: " + why;
    } else {
      choice.engine = Engine::host;
      choice.reason = "auto: " + why + "; registered memory is treated as host memory";
    }
  }
  return choice;
}

}  // namespace phx

namespace phx::detail {

void check_device_id(int device_id) {
  if (device_id < 0 || static_cast<unsigned>(device_id) >= PHXFS_MAX_DEVICES) {
    throw_errno(EINVAL, "device id " + std::to_string(device_id) + " out of range [0, " +
                            std::to_string(PHXFS_MAX_DEVICES) + ")");
  }
}

std::unique_ptr<EngineBackend> make_backend(int device_id, Engine engine) {
  switch (engine) {
    case Engine::direct:
      return make_direct_backend(open_driver(device_id));
    case Engine::host:
      return make_host_backend();
    case Engine::compat:
      throw_errno(ENOTSUP, "device " + std::to_string(device_id) +
                               ": the compat engine is not part of this build");
    case Engine::automatic:
      break;
  }
  throw_errno(EINVAL, "device " + std::to_string(device_id) + ": engine not resolved");
}

}  // namespace phx::detail
