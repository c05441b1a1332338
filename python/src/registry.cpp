// SPDX-License-Identifier: MIT
#include "registry.hpp"

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>

namespace phx::python {
namespace {

std::string text(Range r) {
  return "[" + std::to_string(r.start) + ", +" + std::to_string(r.size) + ")";
}

// Overlapping ranges become one: a batch reading into two views of one
// array registers the union once rather than waiting on itself.
std::vector<Range> merged(std::span<const Range> ranges) {
  std::vector<Range> sorted;
  for (const Range r : ranges) {
    if (r.size != 0) {
      sorted.push_back(r);
    }
  }
  std::sort(sorted.begin(), sorted.end(), [](Range a, Range b) { return a.start < b.start; });
  std::vector<Range> out;
  for (const Range r : sorted) {
    if (!out.empty() && r.start < out.back().end()) {
      out.back().size = std::max(out.back().end(), r.end()) - out.back().start;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace

DeviceEntry::DeviceEntry(int id, const phx::Options &options, bool cpu)
    : device_(phx::Device::open(id, options)), cpu_(cpu) {}

phx::Gather *DeviceEntry::gather() {
  std::call_once(gather_once_, [this] {
    try {
      gather_ = std::make_unique<phx::Gather>(device_);
    } catch (const std::system_error &e) {
      if (e.code().value() != ENOTSUP) {
        throw;  // call_once tries again next time
      }
    }
  });
  return gather_.get();
}

std::shared_ptr<RegEntry> DeviceEntry::covering(Range r, bool *blocked) {
  auto it = entries_.upper_bound(r.start);
  if (it != entries_.begin()) {
    const auto &prev = std::prev(it)->second;
    if (prev->start + prev->size >= r.end()) {
      return prev;
    }
    if (prev->start + prev->size > r.start) {
      it = std::prev(it);
    }
  }
  for (; it != entries_.end() && it->first < r.end(); ++it) {
    const RegEntry &e = *it->second;
    if (e.handles > 0) {
      throw std::system_error(EINVAL, std::system_category(),
                              "register " + text(r) + ": overlaps the registration " +
                                  text({e.start, e.size}) +
                                  " without lying inside it (register one range covering both)");
    }
    *blocked = true;  // a transient registration: gone when its I/O ends
  }
  return nullptr;
}

std::shared_ptr<RegEntry> DeviceEntry::add(Range r) {
  auto e = std::make_shared<RegEntry>();
  e->start = r.start;
  e->size = r.size;
  e->reg = device_.register_memory(reinterpret_cast<void *>(r.start), r.size);  // NOLINT
  entries_.emplace(r.start, e);
  ++registered_total_;
  return e;
}

std::shared_ptr<RegEntry> DeviceEntry::open(Range range) {
  std::unique_lock lock(mutex_);
  for (;;) {
    bool blocked = false;
    std::shared_ptr<RegEntry> e = covering(range, &blocked);
    if (blocked) {
      freed_.wait(lock);
      continue;
    }
    if (!e) {
      e = add(range);
    }
    ++e->handles;
    return e;
  }
}

// Registrations are released under the lock: once an entry leaves the
// table, another thread may register the same range at once, which the
// library refuses (EEXIST) while the old registration still exists.
void DeviceEntry::close(const std::shared_ptr<RegEntry> &entry) {
  {
    const std::lock_guard lock(mutex_);
    if (--entry->handles == 0 && entry->users == 0) {
      entries_.erase(entry->start);
      entry->reg.release();
    }
  }
  freed_.notify_all();
}

bool DeviceEntry::covered(Range r) const {
  auto it = entries_.upper_bound(r.start);
  return it != entries_.begin() &&
         std::prev(it)->second->start + std::prev(it)->second->size >= r.end();
}

bool DeviceEntry::overlaps_explicit(Range r) const {
  auto it = entries_.upper_bound(r.start);
  if (it != entries_.begin()) {
    --it;
  }
  for (; it != entries_.end() && it->first < r.end(); ++it) {
    const RegEntry &e = *it->second;
    if (e.start + e.size > r.start && e.handles > 0) {
      return true;
    }
  }
  return false;
}

std::vector<Use> DeviceEntry::acquire(std::span<const Range> ranges,
                                      std::span<const Range> extents) {
  std::vector<Range> wanted;
  std::vector<std::shared_ptr<RegEntry>> taken;
  std::unique_lock lock(mutex_);
  for (;;) {
    std::vector<Range> chosen;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const bool own = covered(ranges[i]) || overlaps_explicit(extents[i]);
      chosen.push_back(own ? ranges[i] : extents[i]);
    }
    wanted = merged(chosen);
    taken.clear();
    bool blocked = false;
    for (const Range r : wanted) {
      taken.push_back(covering(r, &blocked));
    }
    if (!blocked) {
      break;
    }
    freed_.wait(lock);
  }
  std::vector<std::shared_ptr<RegEntry>> added;
  try {
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      if (!taken[i]) {
        taken[i] = add(wanted[i]);
        added.push_back(taken[i]);
      }
    }
  } catch (...) {
    for (const auto &e : added) {
      entries_.erase(e->start);
    }
    throw;
  }
  std::vector<Use> uses;
  uses.reserve(ranges.size());
  for (const Range r : ranges) {
    Use u;
    for (const auto &e : taken) {
      if (r.size != 0 && e->start <= r.start && r.end() <= e->start + e->size) {
        u.entry = e;
        u.offset = r.start - e->start;
        ++e->users;
        break;
      }
    }
    uses.push_back(std::move(u));
  }
  return uses;
}

void DeviceEntry::release(std::span<const Use> uses) {
  {
    const std::lock_guard lock(mutex_);  // see close()
    for (const Use &u : uses) {
      if (u.entry && --u.entry->users == 0 && u.entry->handles == 0) {
        entries_.erase(u.entry->start);
        u.entry->reg.release();
      }
    }
  }
  freed_.notify_all();
}

bool DeviceEntry::covers(Range range) {
  const std::lock_guard lock(mutex_);
  auto it = entries_.upper_bound(range.start);
  if (it == entries_.begin()) {
    return false;
  }
  const RegEntry &e = *std::prev(it)->second;
  return e.start + e.size >= range.end();
}

std::uint64_t DeviceEntry::registered_total() {
  const std::lock_guard lock(mutex_);
  return registered_total_;
}

std::size_t DeviceEntry::count() {
  const std::lock_guard lock(mutex_);
  return entries_.size();
}

namespace {

struct Table {
  std::mutex mutex;
  std::map<std::tuple<int, phx::Engine, bool>, std::shared_ptr<DeviceEntry>> entries;
};

Table &table() {
  // Never destroyed: see DeviceEntry.
  static auto *t = new Table();  // NOLINT(cppcoreguidelines-owning-memory)
  return *t;
}

}  // namespace

std::shared_ptr<DeviceEntry> device_entry(int id, phx::Engine engine, bool cpu,
                                          const phx::Options *options) {
  if (cpu) {
    id = 0;
    engine = phx::Engine::host;
  } else if (engine == phx::Engine::automatic) {
    engine = phx::choose_engine(id).engine;
  }
  phx::Options wanted = options != nullptr ? *options : phx::Options::defaults();
  wanted.engine = engine;
  Table &t = table();
  const std::lock_guard lock(t.mutex);
  auto &slot = t.entries[{id, engine, cpu}];
  if (!slot) {
    try {
      slot = std::make_shared<DeviceEntry>(id, wanted, cpu);
    } catch (...) {
      t.entries.erase({id, engine, cpu});
      throw;
    }
  } else if (options != nullptr && slot->device().options() != wanted) {
    // One engine instance per GPU and engine in a process: its threads and
    // staging are sized once.
    throw std::system_error(EBUSY, std::system_category(),
                            std::string(cpu ? "cpu" : "cuda:" + std::to_string(id)) + " (" +
                                std::string(phx::to_string(engine)) +
                                ") is open in this process already, with other options");
  }
  return slot;
}

std::vector<std::shared_ptr<DeviceEntry>> open_entries(int id, bool cpu) {
  Table &t = table();
  const std::lock_guard lock(t.mutex);
  std::vector<std::shared_ptr<DeviceEntry>> out;
  for (const auto &[key, entry] : t.entries) {
    if (std::get<2>(key) == cpu && (cpu || std::get<0>(key) == id)) {
      out.push_back(entry);
    }
  }
  return out;
}

std::size_t close_unused_entries() {
  std::vector<std::shared_ptr<DeviceEntry>> closing;  // closed after the lock is released
  {
    Table &t = table();
    const std::lock_guard lock(t.mutex);
    // Holders only appear through device_entry(), under this lock: an
    // entry the table alone holds, with nothing registered, stays unused.
    for (auto it = t.entries.begin(); it != t.entries.end();) {
      if (it->second.use_count() == 1 && it->second->count() == 0) {
        closing.push_back(std::move(it->second));
        it = t.entries.erase(it);
      } else {
        ++it;
      }
    }
  }
  return closing.size();
}

}  // namespace phx::python
