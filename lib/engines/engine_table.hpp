// SPDX-License-Identifier: MIT
// The engine table: one row per engine with its name, C value, aliases,
// capabilities and factory.  Everything that maps between an engine and its
// names or values, builds an engine, or refuses what an engine cannot do
// goes through it; adding an engine is a folder under lib/engines/ and a
// row here (docs/architecture.md, "Adding an engine").
#ifndef PHOENIX_LIB_ENGINES_ENGINE_TABLE_HPP
#define PHOENIX_LIB_ENGINES_ENGINE_TABLE_HPP

#include <array>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "engines/engine_backend.hpp"
#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"

namespace phx::detail {

struct EngineEntry {
  Engine engine = Engine::automatic;
  phxfs_engine_t c_value = PHXFS_ENGINE_AUTO;
  std::string_view name;  ///< a literal: data() is NUL-terminated
  /// Other names parse_engine() accepts (tools' old names): empty slots unused.
  std::array<std::string_view, 2> aliases{};
  EngineCapabilities capabilities{};
  /// Builds the engine for device @p device_id with @p options (validated);
  /// null for Engine::automatic.
  std::unique_ptr<EngineBackend> (*make)(int device_id, const Options &options) = nullptr;
  /// One instance per device, engine and options in a process: devices
  /// opened at the same time share it (its threads and staging) instead of
  /// each building their own.  For engines whose instances hold nothing of a
  /// caller's (no registrations, no descriptors the kernel ties them to).
  bool shared = false;
  /// Position in automatic detection (1 first); 0: never chosen by detection.
  unsigned detect_order = 0;
  /// Whether detection picks this engine for @p device_id; @p why says
  /// why or why not, in words.  Null when detect_order is 0.
  bool (*detect)(int device_id, std::string &why) = nullptr;
};

/// Every engine, auto first.
[[nodiscard]] std::span<const EngineEntry> engine_table() noexcept;
/// The row of @p engine / @p value / @p name (or an alias); null when none.
[[nodiscard]] const EngineEntry *find_engine(Engine engine) noexcept;
[[nodiscard]] const EngineEntry *find_engine(phxfs_engine_t value) noexcept;
[[nodiscard]] const EngineEntry *find_engine(std::string_view name) noexcept;

/// Throws std::system_error(ENOTSUP): "<context>: the <engine> engine has no
/// <capability>[; <hint>]".  The one place an engine's missing capability
/// becomes an error.
[[noreturn]] void refuse(Engine engine, std::string_view context, std::string_view capability,
                         std::string_view hint = {});

}  // namespace phx::detail

#endif  // PHOENIX_LIB_ENGINES_ENGINE_TABLE_HPP
