// SPDX-License-Identifier: MIT
#include "engines/shared_engines.hpp"

#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace phx::detail {
namespace {

struct Instance {
  int device_id = 0;
  Options key;
  pid_t owner = 0;  // a forked child has none of the parent's threads
  std::weak_ptr<EngineBackend> backend;
};

struct Registry {
  std::mutex mutex;
  std::vector<Instance> live;
  // The latest instance of each device, held so that it outlives its
  // devices; at most one per device id, whatever options come and go.
  std::vector<std::pair<int, std::shared_ptr<EngineBackend>>> kept;
  pid_t kept_by = 0;
};

Registry &registry() {
  // Never destroyed: engines still held at exit stay with the process
  // rather than stopping threads and unpinning memory while the CUDA
  // driver tears itself down.
  static auto *r = new Registry;  // NOLINT(cppcoreguidelines-owning-memory)
  return *r;
}

// Call with the registry locked.  A child of fork() inherits the parent's
// instances without their threads: they are forgotten, not destroyed (that
// would join threads the child does not have).
void forget_inherited(Registry &r, pid_t self) {
  if (r.kept_by != self) {
    for (auto &entry : r.kept) {
      new std::shared_ptr<EngineBackend>(std::move(entry.second));  // NOLINT: leaked on purpose
    }
    r.kept.clear();
    r.kept_by = self;
  }
  std::erase_if(r.live,
                [self](const Instance &i) { return i.owner != self || i.backend.expired(); });
}

}  // namespace

std::shared_ptr<EngineBackend> shared_backend(
    int device_id, const Options &key,
    std::unique_ptr<EngineBackend> (*make)(int device_id, const Options &options),
    const Options &options) {
  Registry &r = registry();
  const pid_t self = ::getpid();
  std::shared_ptr<EngineBackend> dropped;  // destroyed after the lock is released
  const std::lock_guard lock(r.mutex);
  forget_inherited(r, self);
  for (const Instance &i : r.live) {
    if (i.device_id == device_id && i.key == key) {
      if (auto backend = i.backend.lock()) {
        return backend;
      }
    }
  }
  std::shared_ptr<EngineBackend> backend = make(device_id, options);
  r.live.push_back({device_id, key, self, backend});
  auto kept = std::find_if(r.kept.begin(), r.kept.end(),
                           [device_id](const auto &entry) { return entry.first == device_id; });
  if (kept == r.kept.end()) {
    r.kept.emplace_back(device_id, backend);
  } else {
    dropped = std::exchange(kept->second, backend);
  }
  return backend;
}

}  // namespace phx::detail

namespace phx {

std::size_t release_idle_engines() noexcept {
  detail::Registry &r = detail::registry();
  std::vector<std::pair<int, std::shared_ptr<detail::EngineBackend>>> released;
  {
    const std::lock_guard lock(r.mutex);
    detail::forget_inherited(r, ::getpid());
    released.swap(r.kept);
  }
  std::size_t idle = 0;
  for (auto &entry : released) {
    idle += entry.second.use_count() == 1 ? 1 : 0;
    entry.second.reset();  // an engine some device still holds goes with its last close
  }
  return idle;
}

}  // namespace phx
