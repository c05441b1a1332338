// SPDX-License-Identifier: MIT
// phx::Options: the one place the library reads its tunables from the
// environment.  Everything else takes an Options (a device's, or the
// process defaults) and never calls getenv.
#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/options.hpp"
#include "phoenix/phoenix.hpp"

namespace phx {
namespace detail {
namespace {

constexpr std::size_t kKiB = std::size_t{1} << 10;
constexpr std::size_t kGiB = std::size_t{1} << 30;

struct Limits {
  std::size_t min;
  std::size_t max;
};
constexpr Limits kQueueDepth{1, 32768};
constexpr Limits kStaging{4 * kKiB, kGiB};
constexpr Limits kCopyThreads{1, 256};
constexpr Limits kCopyDepth{2, 64};
constexpr Limits kCopyChunk{4 * kKiB, kGiB};
constexpr Limits kStreamWorkers{1, 1024};
constexpr Limits kStreamStaging{64 * kKiB, 64 * kGiB};
constexpr Limits kStreamLanes{1, 64};
constexpr Limits kCopySpin{0, 10000};

void check(const char *field, std::size_t value, Limits limits) {
  if (value < limits.min || value > limits.max) {
    throw_errno(EINVAL, std::string("phx::Options::") + field + " = " + std::to_string(value) +
                            ": expected " + std::to_string(limits.min) + ".." +
                            std::to_string(limits.max));
  }
}

std::size_t round_to_page(std::size_t bytes) {
  return (bytes + 4095) / 4096 * 4096;
}

// A variable that was renamed: still honoured (its old meaning), said once.
std::size_t legacy_size(const char *old_name, const char *new_names, std::size_t fallback,
                        Limits limits) {
  if (!env_string(old_name)) {
    return fallback;
  }
  static std::once_flag said;
  std::call_once(said, [&] {
    log(LogLevel::warn, std::string(old_name) + " is deprecated: set " + new_names + " instead");
  });
  return env_size(old_name, fallback, limits.min, limits.max);
}

struct ProcessDefaults {
  Options options;
  std::string engine_origin;  // "PHX_ENGINE=<value>", or empty
};

ProcessDefaults read_environment() {
  ProcessDefaults d;
  Options &o = d.options;
  if (auto engine = env_string("PHX_ENGINE")) {
    o.engine = parse_engine(*engine);
    d.engine_origin = "PHX_ENGINE=" + std::string(*engine);
  }
  o.queue_depth = static_cast<unsigned>(
      env_count("PHX_QUEUE_DEPTH", o.queue_depth, kQueueDepth.min, kQueueDepth.max));
  // PHX_CHUNK_SIZE used to be both the staging buffer and the compat chunk
  // (on every descriptor); the new names win where both are set.
  const std::size_t legacy_chunk =
      legacy_size("PHX_CHUNK_SIZE", "PHX_STAGING_SIZE and PHX_COPY_CHUNK", 0, kStaging);
  o.staging_bytes = env_size("PHX_STAGING_SIZE", legacy_chunk != 0 ? legacy_chunk : o.staging_bytes,
                             kStaging.min, kStaging.max);
  o.copy_threads = static_cast<unsigned>(
      env_count("PHX_COPY_THREADS",
                legacy_size("PHX_NTHREADS", "PHX_COPY_THREADS", o.copy_threads, kCopyThreads),
                kCopyThreads.min, kCopyThreads.max));
  o.copy_depth = static_cast<unsigned>(
      env_count("PHX_COPY_DEPTH", o.copy_depth, kCopyDepth.min, kCopyDepth.max));
  o.copy_chunk =
      round_to_page(env_size("PHX_COPY_CHUNK", legacy_chunk != 0 ? legacy_chunk : o.copy_chunk,
                             kCopyChunk.min, kCopyChunk.max));
  o.copy_direct_chunk = round_to_page(
      env_size("PHX_COPY_DIRECT_CHUNK", legacy_chunk != 0 ? legacy_chunk : o.copy_direct_chunk,
               kCopyChunk.min, kCopyChunk.max));
  o.stream_workers = static_cast<unsigned>(
      env_count("PHX_STREAM_WORKERS", o.stream_workers, kStreamWorkers.min, kStreamWorkers.max));
  o.stream_staging_bytes = env_size("PHX_STREAM_STAGING", o.stream_staging_bytes,
                                    kStreamStaging.min, kStreamStaging.max);
  o.stream_lanes = static_cast<unsigned>(
      env_count("PHX_STREAM_LANES", o.stream_lanes, kStreamLanes.min, kStreamLanes.max));
  if (auto cache = env_string("PHX_READ_CACHE")) {
    o.read_cache = parse_read_cache(*cache, "PHX_READ_CACHE");
  }
  o.copy_spin_us = static_cast<unsigned>(
      env_count("PHX_COPY_SPIN_US", o.copy_spin_us, kCopySpin.min, kCopySpin.max));
  return d;
}

// Published once; refresh_default_options() (tests) drops it.
std::atomic<std::shared_ptr<const ProcessDefaults>> &published() {
  static std::atomic<std::shared_ptr<const ProcessDefaults>> current;
  return current;
}

std::shared_ptr<const ProcessDefaults> process_defaults() {
  auto current = published().load();
  if (current) {
    return current;
  }
  static std::mutex reading;
  const std::lock_guard lock(reading);
  current = published().load();
  if (!current) {
    current = std::make_shared<const ProcessDefaults>(read_environment());
    published().store(current);
  }
  return current;
}

}  // namespace

ReadCache parse_read_cache(std::string_view text, const std::string &what) {
  if (text == "auto") {
    return ReadCache::automatic;
  }
  if (text == "descriptor") {
    return ReadCache::descriptor;
  }
  throw_errno(EINVAL, what + "=" + std::string(text) + ": expected auto or descriptor");
}

std::string_view to_string(ReadCache cache) noexcept {
  return cache == ReadCache::descriptor ? "descriptor" : "auto";
}

std::string default_engine_origin() {
  return process_defaults()->engine_origin;
}

void refresh_default_options() noexcept {
  published().store(nullptr);
}

}  // namespace detail

Options Options::from_environment() {
  return detail::read_environment().options;
}

Options Options::defaults() {
  return detail::process_defaults()->options;
}

void Options::set_defaults(const Options &options) {
  options.validate();
  detail::ProcessDefaults d{options, {}};
  if (options.engine != Engine::automatic) {
    d.engine_origin = "engine=" + std::string(to_string(options.engine)) + " set as the default";
  }
  detail::published().store(std::make_shared<const detail::ProcessDefaults>(std::move(d)));
}

void Options::validate() const {
  using namespace detail;
  if (to_string(engine) == "unknown") {
    throw_errno(EINVAL, "phx::Options::engine = " + std::to_string(static_cast<int>(engine)) +
                            ": not an engine");
  }
  check("queue_depth", queue_depth, kQueueDepth);
  check("staging_bytes", staging_bytes, kStaging);
  check("copy_threads", copy_threads, kCopyThreads);
  check("copy_depth", copy_depth, kCopyDepth);
  check("copy_chunk", copy_chunk, kCopyChunk);
  check("copy_direct_chunk", copy_direct_chunk, kCopyChunk);
  check("stream_workers", stream_workers, kStreamWorkers);
  check("stream_staging_bytes", stream_staging_bytes, kStreamStaging);
  check("stream_lanes", stream_lanes, kStreamLanes);
  check("copy_spin_us", copy_spin_us, kCopySpin);
  if (read_cache != ReadCache::automatic && read_cache != ReadCache::descriptor) {
    throw_errno(EINVAL,
                "phx::Options::read_cache = " + std::to_string(static_cast<int>(read_cache)) +
                    ": expected automatic or descriptor");
  }
}

}  // namespace phx
