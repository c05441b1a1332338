// SPDX-License-Identifier: MIT
// Which engine serves a device: the caller's explicit choice, else
// PHX_ENGINE, else detection: module present -> direct, else a CUDA GPU for
// the device -> compat, else host.
#include <cerrno>
#include <string>

#include "core/config.hpp"
#include "core/device_state.hpp"
#include "core/error.hpp"
#include "engines/direct/driver.hpp"
#include "engines/engine_backend.hpp"
#include "phxfs_ioctl.h"

#if PHX_WITH_CUDA
#include "cuda/gpu.hpp"
#include "engines/cufile/engine_cufile.hpp"
#endif

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
    case Engine::cufile:
      return "cufile";
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
  if (name == "cufile" || name == "gds") {
    return Engine::cufile;
  }
  detail::throw_errno(EINVAL, "unknown engine '" + std::string(name) +
                                  "' (expected auto, direct, host, compat or cufile)");
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
      return choice;
    }
#if PHX_WITH_CUDA
    std::string gpu_why;
    if (detail::cuda::gpu_for_device(device_id, gpu_why)) {
      choice.engine = Engine::compat;
      choice.reason = "auto: " + why + "; " + gpu_why + ": staged copies through pinned memory";
      return choice;
    }
    why += "; " + gpu_why;
#endif
    choice.engine = Engine::host;
    choice.reason = "auto: " + why + "; registered memory is treated as host memory";
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
#if PHX_WITH_CUDA
    case Engine::compat:
      return make_compat_backend(device_id);
    case Engine::cufile:
      return make_cufile_backend(device_id);
#else
    case Engine::compat:
    case Engine::cufile:
      throw_errno(ENOTSUP, "device " + std::to_string(device_id) + ": the " +
                               std::string(to_string(engine)) +
                               " engine needs a libphoenix built with CUDA (PHX_WITH_CUDA)");
#endif
    case Engine::automatic:
      break;
  }
  throw_errno(EINVAL, "device " + std::to_string(device_id) + ": engine not resolved");
}

}  // namespace phx::detail
