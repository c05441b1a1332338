// SPDX-License-Identifier: MIT
// The engine table (engine_table.hpp) and what is derived from it: names,
// C values, the choice of an engine for a device, building it, refusals.
#include "engines/engine_table.hpp"

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "core/device_state.hpp"
#include "core/error.hpp"
#include "core/options.hpp"
#include "engines/direct/driver.hpp"
#include "engines/shared_engines.hpp"
#include "phxfs_ioctl.h"

#if PHX_WITH_CUDA
#include "cuda/gpu.hpp"
#endif

namespace phx::detail {

// Each engine's factory, defined in its folder.
std::unique_ptr<EngineBackend> make_direct_backend(int device_id, const Options &options);
std::unique_ptr<EngineBackend> make_host_backend(int device_id, const Options &options);
#if PHX_WITH_CUDA
std::unique_ptr<EngineBackend> make_compat_backend(int device_id, const Options &options);
std::unique_ptr<EngineBackend> make_cufile_backend(int device_id, const Options &options);
#endif

namespace {

#if PHX_WITH_CUDA
bool detect_compat(int device_id, std::string &why) {
  if (!cuda::gpu_for_device(device_id, why)) {
    return false;
  }
  why += ": staged copies through pinned memory";
  return true;
}
#else
template <Engine kEngine>
std::unique_ptr<EngineBackend> needs_cuda(int device_id, const Options & /*options*/) {
  throw_errno(ENOTSUP, "device " + std::to_string(device_id) + ": the " +
                           std::string(to_string(kEngine)) +
                           " engine needs a libphoenix built with CUDA (PHX_WITH_CUDA)");
}
#endif

bool detect_host(int /*device_id*/, std::string &why) {
  why = "registered memory is treated as host memory";
  return true;
}

// phoenix.hpp's EngineCapabilities comment and docs/api.md show these.
constexpr EngineCapabilities kDirect{
    .device_memory = true, .host_view = true, .io_queue = true, .gather = true};
constexpr EngineCapabilities kHost{.host_view = true, .io_queue = true, .gather = true};
constexpr EngineCapabilities kCompat{.device_memory = true, .gather = true, .staged = true};
constexpr EngineCapabilities kCufile{.device_memory = true};

#if PHX_WITH_CUDA
constexpr auto kMakeCompat = make_compat_backend;
constexpr auto kMakeCufile = make_cufile_backend;
constexpr auto kDetectCompat = detect_compat;
constexpr unsigned kCompatDetectOrder = 2;
#else
constexpr auto kMakeCompat = needs_cuda<Engine::compat>;
constexpr auto kMakeCufile = needs_cuda<Engine::cufile>;
constexpr bool (*kDetectCompat)(int, std::string &) = nullptr;
constexpr unsigned kCompatDetectOrder = 0;
#endif

// Automatic detection tries direct, then compat, then host (detect_order).
const EngineEntry kEngines[] = {
    {.engine = Engine::automatic,
     .c_value = PHXFS_ENGINE_AUTO,
     .name = "auto",
     .aliases = {"automatic"}},
    {.engine = Engine::direct,
     .c_value = PHXFS_ENGINE_DIRECT,
     .name = "direct",
     .aliases = {"phoenix"},
     .capabilities = kDirect,
     .make = make_direct_backend,
     .detect_order = 1,
     .detect = direct_available},
    {.engine = Engine::host,
     .c_value = PHXFS_ENGINE_HOST,
     .name = "host",
     .capabilities = kHost,
     .make = make_host_backend,
     .detect_order = 3,
     .detect = detect_host},
    {.engine = Engine::compat,
     .c_value = PHXFS_ENGINE_COMPAT,
     .name = "compat",
     .capabilities = kCompat,
     .make = kMakeCompat,
     // Copy threads and pinned staging per GPU: eight loaders at once
     // with one engine each ran 96 copy threads and took 10x the time of
     // the same loads one after another (issue 26).
     .shared = true,
     .detect_order = kCompatDetectOrder,
     .detect = kDetectCompat},
    {.engine = Engine::cufile,
     .c_value = PHXFS_ENGINE_CUFILE,
     .name = "cufile",
     .aliases = {"gds"},
     .capabilities = kCufile,
     .make = kMakeCufile},
};

template <typename Match>
const EngineEntry *find_if(Match match) noexcept {
  const auto *it = std::find_if(std::begin(kEngines), std::end(kEngines), match);
  return it == std::end(kEngines) ? nullptr : it;
}

}  // namespace

std::span<const EngineEntry> engine_table() noexcept {
  return kEngines;
}

const EngineEntry *find_engine(Engine engine) noexcept {
  return find_if([engine](const EngineEntry &e) { return e.engine == engine; });
}

const EngineEntry *find_engine(phxfs_engine_t value) noexcept {
  return find_if([value](const EngineEntry &e) { return e.c_value == value; });
}

const EngineEntry *find_engine(std::string_view name) noexcept {
  return find_if([name](const EngineEntry &e) {
    return !name.empty() && (e.name == name || std::find(e.aliases.begin(), e.aliases.end(),
                                                         name) != e.aliases.end());
  });
}

void refuse(Engine engine, std::string_view context, std::string_view capability,
            std::string_view hint) {
  std::string text = std::string(context) + ": the " + std::string(to_string(engine)) +
                     " engine has no " + std::string(capability);
  if (!hint.empty()) {
    text += "; " + std::string(hint);
  }
  throw_errno(ENOTSUP, text);
}

EngineCapabilities EngineBackend::capabilities() const noexcept {
  const EngineEntry *entry = find_engine(kind());
  return entry != nullptr ? entry->capabilities : EngineCapabilities{};
}

TransferResult EngineBackend::native_batch(Direction /*dir*/, int /*fd*/,
                                           const Mapping & /*mapping*/,
                                           std::span<const BatchPiece> /*pieces*/) {
  refuse(kind(), "engine batch", "batch API of its own", "use phx::IoQueue or phx::Gather");
}

void EngineBackend::native_submit_async(Direction /*dir*/, int /*fd*/, const Mapping & /*mapping*/,
                                        StreamParams & /*params*/, CUstream_st * /*stream*/) {
  refuse(kind(), "engine stream submission", "stream API of its own",
         "use File::read_async/write_async");
}

void check_device_id(int device_id) {
  if (device_id < 0 || static_cast<unsigned>(device_id) >= PHXFS_MAX_DEVICES) {
    throw_errno(EINVAL, "device id " + std::to_string(device_id) + " out of range [0, " +
                            std::to_string(PHXFS_MAX_DEVICES) + ")");
  }
}

std::shared_ptr<EngineBackend> make_backend(int device_id, Engine engine, const Options &options) {
  const EngineEntry *entry = find_engine(engine);
  if (entry == nullptr || entry->make == nullptr) {
    throw_errno(EINVAL, "device " + std::to_string(device_id) + ": engine not resolved");
  }
  if (!entry->shared) {
    return entry->make(device_id, options);
  }
  Options key = options;
  key.engine = engine;
  return shared_backend(device_id, key, entry->make, options);
}

}  // namespace phx::detail

namespace phx {

std::string_view to_string(Engine engine) noexcept {
  const detail::EngineEntry *entry = detail::find_engine(engine);
  return entry != nullptr ? entry->name : "unknown";
}

Engine parse_engine(std::string_view name) {
  if (const detail::EngineEntry *entry = detail::find_engine(name)) {
    return entry->engine;
  }
  std::string expected;
  const auto table = detail::engine_table();
  for (std::size_t i = 0; i < table.size(); ++i) {
    expected += (i == 0 ? "" : i + 1 == table.size() ? " or " : ", ");
    expected += table[i].name;
  }
  detail::throw_errno(EINVAL,
                      "unknown engine '" + std::string(name) + "' (expected " + expected + ")");
}

EngineCapabilities engine_capabilities(Engine engine) {
  const detail::EngineEntry *entry = detail::find_engine(engine);
  if (entry == nullptr || entry->make == nullptr) {
    detail::throw_errno(EINVAL, "engine " + std::string(to_string(engine)) +
                                    " has no capabilities of its own (resolve it with "
                                    "choose_engine() first)");
  }
  return entry->capabilities;
}

EngineChoice choose_engine(int device_id, Engine requested) {
  detail::check_device_id(device_id);
  EngineChoice choice;
  std::string origin = detail::default_engine_origin();
  if (requested != Engine::automatic) {
    choice.engine = requested;
    // Device::open() passes the process default on as a request.
    choice.reason = !origin.empty() && requested == Options::defaults().engine
                        ? std::move(origin)
                        : std::string("requested by the caller");
  } else if (!origin.empty()) {
    choice.engine = Options::defaults().engine;
    choice.reason = std::move(origin);
  }
  if (choice.engine == Engine::automatic || choice.reason.empty()) {
    std::vector<const detail::EngineEntry *> order;
    for (const detail::EngineEntry &e : detail::engine_table()) {
      if (e.detect_order != 0) {
        order.push_back(&e);
      }
    }
    std::sort(order.begin(), order.end(),
              [](const auto *a, const auto *b) { return a->detect_order < b->detect_order; });
    // Every engine passed over says why, in order, before the one chosen.
    std::string passed;
    for (const detail::EngineEntry *e : order) {
      std::string why;
      const bool chosen = e->detect(device_id, why);
      passed += (passed.empty() ? "" : "; ") + why;
      if (chosen) {
        choice.engine = e->engine;
        choice.reason = "auto: " + passed;
        return choice;
      }
    }
    detail::throw_errno(ENODEV, "device " + std::to_string(device_id) + ": no engine detected");
  }
  return choice;
}

}  // namespace phx
