// SPDX-License-Identifier: MIT
// The C API: a process-wide table of open devices over DeviceState, errors
// turned into -1 + errno and a per-thread message.
#include <sys/types.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <type_traits>

#include "core/device_state.hpp"
#include "core/error.hpp"
#include "engines/engine_table.hpp"
#include "io/buffered_twin.hpp"
#include "io/file_caps.hpp"
#include "io/stream_io.hpp"
#include "phoenix/phoenix.h"
#include "phxfs_ioctl.h"

namespace phx::detail {
namespace {

thread_local std::string last_error;

struct OpenDevice {
  std::shared_ptr<DeviceState> state;
  unsigned opens = 0;
};

class DeviceTable {
 public:
  // @p exact: the device may already be open only with these options
  // (phxfs_open_options); otherwise only the engine must agree.
  int open(int device_id, const Options &options, bool exact) {
    check_device_id(device_id);
    const std::unique_lock lock(mutex_);
    OpenDevice &slot = slots_.at(static_cast<std::size_t>(device_id));
    if (slot.state) {
      const Engine requested = options.engine;
      if (requested != Engine::automatic && requested != slot.state->engine()) {
        throw_errno(EBUSY, "device " + std::to_string(device_id) + " is already open with the " +
                               std::string(to_string(slot.state->engine())) + " engine");
      }
      Options open_with = slot.state->options();
      open_with.engine = options.engine;
      if (exact && open_with != options) {
        throw_errno(EBUSY,
                    "device " + std::to_string(device_id) + " is already open with other options");
      }
      ++slot.opens;
      return 0;
    }
    slot.state = DeviceState::open(device_id, options);
    slot.opens = 1;
    return 0;
  }

  void close(int device_id) {
    check_device_id(device_id);
    std::shared_ptr<DeviceState> state;
    {
      const std::unique_lock lock(mutex_);
      OpenDevice &slot = slots_.at(static_cast<std::size_t>(device_id));
      if (!slot.state) {
        throw_errno(ENODEV, "device " + std::to_string(device_id) + " is not open");
      }
      if (--slot.opens > 0) {
        return;
      }
      state = std::move(slot.state);
    }
    // Outside the lock: unmapping and unpinning can take a while.
    state->deregister_all();
  }

  [[nodiscard]] std::shared_ptr<DeviceState> get(int device_id) const {
    check_device_id(device_id);
    const std::shared_lock lock(mutex_);
    auto state = slots_.at(static_cast<std::size_t>(device_id)).state;
    if (!state) {
      throw_errno(ENODEV, "device " + std::to_string(device_id) + " is not open");
    }
    return state;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::array<OpenDevice, PHXFS_MAX_DEVICES> slots_{};
};

DeviceTable &devices() {
  static DeviceTable table;
  return table;
}

void fail(const char *function, int err, const std::string &what) noexcept {
  try {
    last_error = std::string(function) + ": " + what;
  } catch (...) {
    last_error.clear();
  }
  errno = err;
}

// Runs body; turns exceptions into errno + last_error and returns failure.
template <typename R, typename Body>
R guarded(const char *function, R failure, Body &&body) noexcept {
  try {
    return body();
  } catch (const std::system_error &e) {
    fail(function, e.code().value(), e.what());
  } catch (const std::bad_alloc &) {
    fail(function, ENOMEM, "out of memory");
  } catch (const std::exception &e) {
    fail(function, EIO, e.what());
  } catch (...) {
    fail(function, EIO, "unknown error");
  }
  return failure;
}

std::string pointer_text(const void *p) {
  char text[32] = {};
  (void)std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

// Options::read_cache: reads into memory other than the direct engine's
// mapped device pages (where O_DIRECT is the NVMe's DMA) follow the cache
// policy unless the device's options say to read as the descriptor is.
bool follows_cache_policy(Direction dir, const DeviceState &state) noexcept {
  if (dir != Direction::read || state.options().read_cache != ReadCache::automatic) {
    return false;
  }
  const EngineCapabilities caps = state.capabilities();
  return !(caps.device_memory && caps.host_view);
}

// The registration a request targets, after the checks every I/O makes.
struct Target {
  std::shared_ptr<DeviceState> state;
  std::shared_ptr<Mapping> mapping;
  std::uintptr_t address = 0;
};

template <typename What>
Target resolve(const What &what, phxfs_fileid_t fid, const void *buf, off_t buf_offset,
               size_t nbyte, off_t f_offset) {
  if (buf == nullptr) {
    throw_errno(EINVAL, what() + ": null buffer");
  }
  if (buf_offset < 0 || f_offset < 0) {
    throw_errno(EINVAL, what() + ": negative offset");
  }
  constexpr auto kMaxOff = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
  if (nbyte > static_cast<std::size_t>(std::numeric_limits<ssize_t>::max()) ||
      nbyte > kMaxOff - static_cast<std::uint64_t>(f_offset)) {
    throw_errno(EINVAL, what() + ": size too large");
  }
  if (fid.fd < 0) {
    throw_errno(EBADF, what() + ": bad file descriptor");
  }
  Target t;
  t.state = devices().get(fid.deviceID);
  const auto base = reinterpret_cast<std::uintptr_t>(buf);
  t.address = base + static_cast<std::uintptr_t>(buf_offset);
  if (t.address < base) {
    throw_errno(EINVAL, what() + ": buffer offset wraps");
  }
  t.mapping = t.state->table().find(t.address, std::max<std::size_t>(nbyte, 1));
  if (!t.mapping) {
    throw_errno(EFAULT, what() + ": target range is not inside one registration");
  }
  return t;
}

ssize_t io(const char *function, Direction dir, phxfs_fileid_t fid, const void *buf,
           off_t buf_offset, size_t nbyte, off_t f_offset) {
  // Built only on failure: this is the per-I/O path.
  const auto what = [&] {
    return std::string(function) + "(fd " + std::to_string(fid.fd) + ", device " +
           std::to_string(fid.deviceID) + ", buf " + pointer_text(buf) + " + " +
           std::to_string(buf_offset) + ", size " + std::to_string(nbyte) + ", offset " +
           std::to_string(f_offset) + ")";
  };
  const Target target = resolve(what, fid, buf, buf_offset, nbyte, f_offset);
  const auto &state = target.state;
  const auto &mapping = target.mapping;
  const std::uintptr_t address = target.address;
  if (nbyte == 0) {
    return 0;
  }
  const std::size_t mapping_offset = address - mapping->device_address();
  // Engines without a host view align against the device address.
  const std::uintptr_t host =
      mapping->host_view() != nullptr
          ? reinterpret_cast<std::uintptr_t>(mapping->host_view()) + mapping_offset
          : address;
  const auto file_offset = static_cast<std::uint64_t>(f_offset);
  // Page-aligned requests are valid with or without O_DIRECT, so the common
  // case needs no fcntl/statx; anything else asks the descriptor.
  const PolicyReadFd chosen(follows_cache_policy(dir, *state) ? fid.fd : -1, file_offset, nbyte);
  const int fd = chosen.buffered_twin() ? chosen.fd() : fid.fd;
  const bool page_aligned = (host | file_offset | nbyte) % kFallbackDirectAlign == 0;
  IoPolicy policy = chosen.buffered_twin() ? IoPolicy{} : page_aligned_policy();
  if (!page_aligned && !chosen.buffered_twin() && !policy_for_fd(fd, policy)) {
    const int err = errno;
    throw_errno(err, what());
  }
  policy.chunk_size = state->options().staging_bytes;
  TransferResult r =
      state->backend().transfer(dir, fd, *mapping, mapping_offset, nbyte, file_offset, policy);
  if (r.error == EINVAL && r.done == 0 && page_aligned && !chosen.buffered_twin()) {
    // The device wants more than 4 KiB alignment: ask it and stage.
    if (!policy_for_fd(fd, policy)) {
      const int err = errno;
      throw_errno(err, what());
    }
    policy.chunk_size = state->options().staging_bytes;
    r = state->backend().transfer(dir, fd, *mapping, mapping_offset, nbyte, file_offset, policy);
  }
  if (r.error != 0) {
    const std::string detail = r.detail.empty() ? std::string() : ": " + r.detail;
    if (r.done == 0) {
      throw_errno(r.error, what() + detail);
    }
    // POSIX short-count convention: report progress now, the error on the
    // next call.  The message still says what happened.
    fail(function, r.error,
         what() + ": stopped after " + std::to_string(r.done) + " bytes" + detail);
  }
  return static_cast<ssize_t>(r.done);
}

int io_async(const char *function, Direction dir, phxfs_fileid_t fid, const void *buf, size_t nbyte,
             off_t f_offset, ssize_t *bytes_done, CUstream_st *stream) {
  const auto what = [&] {
    return std::string(function) + "(fd " + std::to_string(fid.fd) + ", device " +
           std::to_string(fid.deviceID) + ", buf " + pointer_text(buf) + ", size " +
           std::to_string(nbyte) + ", offset " + std::to_string(f_offset) + ", stream " +
           pointer_text(stream) + ")";
  };
  Target target = resolve(what, fid, buf, 0, nbyte, f_offset);
  StreamRequest request;
  request.dir = dir;
  request.fd = fid.fd;
  // The page cache as it is at submission decides, as for File::read_async.
  if (PolicyReadFd chosen(follows_cache_policy(dir, *target.state) ? fid.fd : -1,
                          static_cast<std::uint64_t>(f_offset), nbyte);
      chosen.buffered_twin()) {
    const int twin = chosen.release();
    request.fd = twin;
    request.owned_fd =
        std::shared_ptr<const void>(nullptr, [twin](const void *) { ::close(twin); });
  }
  request.mapping_offset = target.address - target.mapping->device_address();
  request.size = nbyte;
  request.file_offset = static_cast<std::uint64_t>(f_offset);
  request.bytes_done = bytes_done;
  if (!policy_for_fd(request.fd, request.policy)) {
    const int err = errno;
    throw_errno(err, what());
  }
  request.device = std::move(target.state);
  request.mapping = std::move(target.mapping);
  try {
    submit_stream_ordered(std::move(request), stream);
  } catch (const std::system_error &e) {
    throw_errno(e.code().value(), what() + ": " + e.what());
  }
  return 0;
}

}  // namespace
}  // namespace phx::detail

using phx::Engine;
using phx::detail::devices;
using phx::detail::guarded;

namespace {

Engine engine_from_c(phxfs_engine_t engine) {
  if (const phx::detail::EngineEntry *entry = phx::detail::find_engine(engine)) {
    return entry->engine;
  }
  phx::detail::throw_errno(EINVAL, "unknown engine " + std::to_string(static_cast<int>(engine)));
}

phxfs_engine_t engine_to_c(Engine engine) {
  const phx::detail::EngineEntry *entry = phx::detail::find_engine(engine);
  return entry != nullptr ? entry->c_value : PHXFS_ENGINE_AUTO;
}

}  // namespace

extern "C" {

int phxfs_open(int device_id) {
  return phxfs_open_engine(device_id, PHXFS_ENGINE_AUTO);
}

int phxfs_open_engine(int device_id, phxfs_engine_t engine) {
  phx::detail::last_error.clear();
  return guarded("phxfs_open", -1, [&] {
    phx::Options options = phx::Options::defaults();
    if (const Engine e = engine_from_c(engine); e != Engine::automatic) {
      options.engine = e;
    }
    return devices().open(device_id, options, false);
  });
}

int phxfs_options_init(phxfs_options_t *options) {
  phx::detail::last_error.clear();
  return guarded("phxfs_options_init", -1, [&] {
    if (options == nullptr) {
      phx::detail::throw_errno(EINVAL, "null options");
    }
    const phx::Options o = phx::Options::defaults();
    *options = phxfs_options_t{};
    options->size = sizeof(phxfs_options_t);
    options->engine = engine_to_c(o.engine);
    options->queue_depth = o.queue_depth;
    options->staging_bytes = o.staging_bytes;
    options->copy_threads = o.copy_threads;
    options->copy_depth = o.copy_depth;
    options->copy_chunk = o.copy_chunk;
    options->copy_direct_chunk = o.copy_direct_chunk;
    options->stream_workers = o.stream_workers;
    options->stream_staging_bytes = o.stream_staging_bytes;
    options->read_cache = o.read_cache == phx::ReadCache::descriptor ? PHXFS_READ_CACHE_DESCRIPTOR
                                                                     : PHXFS_READ_CACHE_AUTO;
    options->copy_spin_us = o.copy_spin_us;
    return 0;
  });
}

int phxfs_open_options(int device_id, const phxfs_options_t *options) {
  phx::detail::last_error.clear();
  return guarded("phxfs_open_options", -1, [&] {
    if (options == nullptr) {
      phx::detail::throw_errno(EINVAL, "null options");
    }
    // A caller built before read_cache existed passes the size that ends
    // before it and gets the defaults for it and copy_spin_us.
    constexpr std::size_t kBeforeReadCache = offsetof(phxfs_options_t, read_cache);
    if (options->size != sizeof(phxfs_options_t) && options->size != kBeforeReadCache) {
      phx::detail::throw_errno(EINVAL, "options.size " + std::to_string(options->size) +
                                           ": this library knows " +
                                           std::to_string(sizeof(phxfs_options_t)) +
                                           " (fill it with phxfs_options_init)");
    }
    phx::Options o;
    o.engine = engine_from_c(options->engine);
    o.queue_depth = options->queue_depth;
    o.staging_bytes = options->staging_bytes;
    o.copy_threads = options->copy_threads;
    o.copy_depth = options->copy_depth;
    o.copy_chunk = options->copy_chunk;
    o.copy_direct_chunk = options->copy_direct_chunk;
    o.stream_workers = options->stream_workers;
    o.stream_staging_bytes = options->stream_staging_bytes;
    if (options->size == sizeof(phxfs_options_t)) {
      // Read as its integer: a C caller may store any int in the enum, and
      // loading one outside the enumerators as the enum is undefined in C++.
      std::underlying_type_t<phxfs_read_cache_t> cache = 0;
      std::memcpy(&cache, &options->read_cache, sizeof(cache));
      if (cache == PHXFS_READ_CACHE_AUTO) {
        o.read_cache = phx::ReadCache::automatic;
      } else if (cache == PHXFS_READ_CACHE_DESCRIPTOR) {
        o.read_cache = phx::ReadCache::descriptor;
      } else {
        phx::detail::throw_errno(EINVAL, "options.read_cache " + std::to_string(cache) +
                                             ": expected PHXFS_READ_CACHE_AUTO or _DESCRIPTOR");
      }
      o.copy_spin_us = options->copy_spin_us;
    }
    // Not in phxfs_options_t (yet): as the process defaults say
    // (PHX_STREAM_LANES, or phx::Options::set_defaults).
    o.stream_lanes = phx::Options::defaults().stream_lanes;
    o.validate();
    return devices().open(device_id, o, true);
  });
}

int phxfs_close(int device_id) {
  phx::detail::last_error.clear();
  return guarded("phxfs_close", -1, [&] {
    devices().close(device_id);
    return 0;
  });
}

phxfs_engine_t phxfs_device_engine(int device_id) {
  phx::detail::last_error.clear();
  return guarded("phxfs_device_engine", PHXFS_ENGINE_ERROR,
                 [&] { return engine_to_c(devices().get(device_id)->engine()); });
}

int phxfs_release_idle_engines(void) {
  return static_cast<int>(phx::release_idle_engines());
}

const char *phxfs_engine_name(phxfs_engine_t engine) {
  // Table names are literals, so data() is NUL-terminated.
  const phx::detail::EngineEntry *entry = phx::detail::find_engine(engine);
  return entry != nullptr ? entry->name.data() : "unknown";
}

int phxfs_regmem(int device_id, const void *addr, size_t len, void **target_addr) {
  phx::detail::last_error.clear();
  return guarded("phxfs_regmem", -1, [&] {
    if (target_addr == nullptr) {
      phx::detail::throw_errno(EINVAL, "null target_addr");
    }
    auto state = devices().get(device_id);
    auto mapping = state->register_range(addr, len);
    // Engines without a host view take the device address.
    *target_addr =
        mapping->host_view() != nullptr ? mapping->host_view() : const_cast<void *>(addr);
    return 0;
  });
}

int phxfs_deregmem(int device_id, const void *addr, size_t len) {
  phx::detail::last_error.clear();
  return guarded("phxfs_deregmem", -1, [&] {
    devices().get(device_id)->deregister_range(addr, len);
    return 0;
  });
}

ssize_t phxfs_read(phxfs_fileid_t fid, void *buf, off_t buf_offset, size_t nbyte, off_t f_offset) {
  phx::detail::last_error.clear();
  return guarded("phxfs_read", ssize_t{-1}, [&] {
    return phx::detail::io("phxfs_read", phx::detail::Direction::read, fid, buf, buf_offset, nbyte,
                           f_offset);
  });
}

ssize_t phxfs_write(phxfs_fileid_t fid, const void *buf, off_t buf_offset, size_t nbyte,
                    off_t f_offset) {
  phx::detail::last_error.clear();
  return guarded("phxfs_write", ssize_t{-1}, [&] {
    return phx::detail::io("phxfs_write", phx::detail::Direction::write, fid, buf, buf_offset,
                           nbyte, f_offset);
  });
}

int phxfs_read_async(phxfs_fileid_t fid, void *buf, size_t nbytes, off_t f_offset,
                     ssize_t *bytes_done, struct CUstream_st *stream) {
  phx::detail::last_error.clear();
  return guarded("phxfs_read_async", -1, [&] {
    return phx::detail::io_async("phxfs_read_async", phx::detail::Direction::read, fid, buf, nbytes,
                                 f_offset, bytes_done, stream);
  });
}

int phxfs_write_async(phxfs_fileid_t fid, const void *buf, size_t nbytes, off_t f_offset,
                      ssize_t *bytes_done, struct CUstream_st *stream) {
  phx::detail::last_error.clear();
  return guarded("phxfs_write_async", -1, [&] {
    return phx::detail::io_async("phxfs_write_async", phx::detail::Direction::write, fid, buf,
                                 nbytes, f_offset, bytes_done, stream);
  });
}

const char *phxfs_strerror(int errnum) {
  switch (errnum) {
    case 0:
      return "success";
    case ENODEV:
      return "device not open, or the phxfs module does not serve it";
    case EFAULT:
      return "address range is not inside one registration";
    case EEXIST:
      return "range already registered";
    case EPROTO:
      return "phxfs module and library speak different ABI versions";
    case ENOTSUP:
      return "not available in this build or on this machine (engine, CUDA or cuFile)";
    case EBUSY:
      return "device already open with another engine";
    default:
      break;
  }
  // strerror() is not thread-safe; each thread keeps its own copy.
  thread_local char text[128];
  (void)std::snprintf(text, sizeof(text), "%s", phx::detail::errno_text(errnum).c_str());
  return text;
}

const char *phxfs_last_error(void) {
  return phx::detail::last_error.c_str();
}

const char *phxfs_version(void) {
  return PHOENIX_VERSION_STRING;
}

}  // extern "C"
