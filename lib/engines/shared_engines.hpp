// SPDX-License-Identifier: MIT
// Engines shared per process (EngineEntry::shared): devices of one GPU open
// at the same time with the same options share one instance, and the
// latest instance of each device stays set up after its last device
// closes, so that the next open (a one-line load's, a new Loader's) finds
// its threads running and its staging pinned instead of paying for them
// again.  phx::release_idle_engines() lets them go.
#ifndef PHOENIX_LIB_ENGINES_SHARED_ENGINES_HPP
#define PHOENIX_LIB_ENGINES_SHARED_ENGINES_HPP

#include <memory>

#include "engines/engine_backend.hpp"
#include "phoenix/phoenix.hpp"

namespace phx::detail {

/// The live instance for @p device_id and @p key (options with the
/// resolved engine), else one built by @p make and recorded.  Throws what
/// @p make throws.
[[nodiscard]] std::shared_ptr<EngineBackend> shared_backend(
    int device_id, const Options &key,
    std::unique_ptr<EngineBackend> (*make)(int device_id, const Options &options),
    const Options &options);

}  // namespace phx::detail

#endif  // PHOENIX_LIB_ENGINES_SHARED_ENGINES_HPP
