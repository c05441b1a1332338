// SPDX-License-Identifier: MIT
#include "engines/cufile/cufile_loader.hpp"

#include <dlfcn.h>

#include <cerrno>
#include <mutex>

#include "core/config.hpp"
#include "core/error.hpp"

namespace phx::detail::cufile {
namespace {

template <typename Fn>
bool resolve(void *lib, const char *symbol, Fn &fn, std::string &missing) {
  void *address = ::dlsym(lib, symbol);
  if (address == nullptr) {
    missing = symbol;
    return false;
  }
  fn = reinterpret_cast<Fn>(address);  // NOLINT: dlsym returns untyped addresses
  return true;
}

struct Loaded {
  Library lib;
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded l;
  const auto name = env_string("PHX_CUFILE_LIBRARY");
  const std::string first = name ? std::string(*name) : "libcufile.so.0";
  void *handle = ::dlopen(first.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr && !name) {
    handle = ::dlopen("libcufile.so", RTLD_NOW | RTLD_LOCAL);
  }
  if (handle == nullptr) {
    const char *e = ::dlerror();  // NOLINT(concurrency-mt-unsafe): once, under static init
    l.why = "libcufile not found (" + std::string(e != nullptr ? e : first) + ")";
    return l;
  }
  Library &f = l.lib;
  std::string missing;
  bool ok = resolve(handle, "cuFileDriverOpen", f.DriverOpen, missing) &&
            (resolve(handle, "cuFileDriverClose_v2", f.DriverClose, missing) ||
             resolve(handle, "cuFileDriverClose", f.DriverClose, missing)) &&
            resolve(handle, "cuFileHandleRegister", f.HandleRegister, missing) &&
            resolve(handle, "cuFileHandleDeregister", f.HandleDeregister, missing) &&
            resolve(handle, "cuFileBufRegister", f.BufRegister, missing) &&
            resolve(handle, "cuFileBufDeregister", f.BufDeregister, missing) &&
            resolve(handle, "cuFileRead", f.Read, missing) &&
            resolve(handle, "cuFileWrite", f.Write, missing);
  if (!ok) {
    l.why = "libcufile lacks " + missing;
    return l;
  }
  // Batch and stream APIs arrived later (cuFile 1.6 / 1.7): optional.
  (void)resolve(handle, "cuFileBatchIOSetUp", f.BatchIOSetUp, missing);
  (void)resolve(handle, "cuFileBatchIOSubmit", f.BatchIOSubmit, missing);
  (void)resolve(handle, "cuFileBatchIOGetStatus", f.BatchIOGetStatus, missing);
  (void)resolve(handle, "cuFileBatchIODestroy", f.BatchIODestroy, missing);
  (void)resolve(handle, "cuFileReadAsync", f.ReadAsync, missing);
  (void)resolve(handle, "cuFileWriteAsync", f.WriteAsync, missing);
  (void)resolve(handle, "cuFileStreamRegister", f.StreamRegister, missing);
  (void)resolve(handle, "cuFileStreamDeregister", f.StreamDeregister, missing);
  l.ok = true;
  return l;
}

const Loaded &loaded() noexcept {
  static const Loaded instance = [] {
    try {
      return load();
    } catch (...) {
      return Loaded{};
    }
  }();
  return instance;
}

const char *status_name(int err) {
  switch (err) {
    case 0:
      return "success";
    case 5001:
      return "driver not initialised";
    case 5007:
      return "platform not supported";
    case 5008:
      return "I/O not supported";
    case 5009:
      return "device not supported";
    case 5010:
      return "nvidia-fs driver error";
    case 5011:
      return "CUDA driver error";
    case 5012:
      return "invalid CUDA pointer";
    case 5013:
      return "invalid CUDA memory type";
    case 5018:
      return "invalid file type";
    case 5019:
      return "invalid file open flags";
    case 5020:
      return "O_DIRECT not set";
    case 5022:
      return "invalid value";
    case 5023:
      return "memory already registered";
    case 5024:
      return "memory not registered";
    case 5025:
      return "permission denied";
    case 5026:
      return "driver already open";
    case 5027:
      return "file handle not registered: cuFile could not get the volume attributes of "
             "this file system";
    case 5029:
      return "device not found";
    case 5030:
      return "internal error";
    case 5034:
      return "I/O disabled";
    case 5036:
      return "GPU memory pinning failed";
    default:
      return nullptr;
  }
}

}  // namespace

const Library *library(std::string &why) noexcept {
  const Loaded &l = loaded();
  if (!l.ok) {
    try {
      why = l.why;
    } catch (...) {
    }
    return nullptr;
  }
  return &l.lib;
}

std::string error_text(const char *call, Error e) {
  std::string out = std::string(call) + ": cuFile error " + std::to_string(e.err);
  if (const char *name = status_name(e.err)) {
    out += std::string(" (") + name + ")";
  }
  if (e.cu_err != 0) {
    out += ", CUDA error " + std::to_string(e.cu_err);
  }
  return out;
}

const Library &driver() {
  static std::once_flag once;
  static Error opened{};
  std::string why;
  const Library *lib = library(why);
  if (lib == nullptr) {
    throw_errno(ENOTSUP, "cuFile engine unavailable: " + why);
  }
  std::call_once(once, [lib] { opened = lib->DriverOpen(); });
  if (opened.err != 0) {
    throw_errno(EIO, error_text("cuFileDriverOpen", opened));
  }
  return *lib;
}

}  // namespace phx::detail::cufile
