// SPDX-License-Identifier: MIT
#include "cufile_api.hpp"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "common/timing.hpp"

namespace phxcufile {
namespace {

template <typename Fn>
void bind(void *lib, const std::string &library, const char *symbol, Fn &fn) {
  void *address = dlsym(lib, symbol);
  if (address == nullptr) {
    throw std::runtime_error(library + " has no " + symbol);
  }
  fn = reinterpret_cast<Fn>(address);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
}

}  // namespace

std::string error_name(int err) {
  // The values NVIDIA's reference documents for CUfileOpError.
  static constexpr struct {
    int value;
    const char *name;
  } kNames[] = {
      {0, "CU_FILE_SUCCESS"},
      {5001, "CU_FILE_DRIVER_NOT_INITIALIZED"},
      {5002, "CU_FILE_DRIVER_INVALID_PROPS"},
      {5003, "CU_FILE_DRIVER_UNSUPPORTED_LIMIT"},
      {5004, "CU_FILE_DRIVER_VERSION_MISMATCH"},
      {5005, "CU_FILE_DRIVER_VERSION_READ_ERROR"},
      {5006, "CU_FILE_DRIVER_CLOSING"},
      {5007, "CU_FILE_PLATFORM_NOT_SUPPORTED"},
      {5008, "CU_FILE_IO_NOT_SUPPORTED"},
      {5009, "CU_FILE_DEVICE_NOT_SUPPORTED"},
      {5010, "CU_FILE_NVFS_DRIVER_ERROR"},
      {5011, "CU_FILE_CUDA_DRIVER_ERROR"},
      {5012, "CU_FILE_CUDA_POINTER_INVALID"},
      {5013, "CU_FILE_CUDA_MEMORY_TYPE_INVALID"},
      {5014, "CU_FILE_CUDA_POINTER_RANGE_ERROR"},
      {5015, "CU_FILE_CUDA_CONTEXT_MISMATCH"},
      {5016, "CU_FILE_INVALID_MAPPING_SIZE"},
      {5017, "CU_FILE_INVALID_MAPPING_RANGE"},
      {5018, "CU_FILE_INVALID_FILE_TYPE"},
      {5019, "CU_FILE_INVALID_FILE_OPEN_FLAG"},
      {5020, "CU_FILE_DIO_NOT_SET"},
      {5022, "CU_FILE_INVALID_VALUE"},
      {5023, "CU_FILE_MEMORY_ALREADY_REGISTERED"},
      {5024, "CU_FILE_MEMORY_NOT_REGISTERED"},
      {5025, "CU_FILE_PERMISSION_DENIED"},
      {5026, "CU_FILE_DRIVER_ALREADY_OPEN"},
      {5027, "CU_FILE_HANDLE_NOT_REGISTERED"},
      {5028, "CU_FILE_HANDLE_ALREADY_REGISTERED"},
      {5029, "CU_FILE_DEVICE_NOT_FOUND"},
      {5030, "CU_FILE_INTERNAL_ERROR"},
      {5031, "CU_FILE_GETNEWFD_FAILED"},
      {5033, "CU_FILE_NVFS_SETUP_ERROR"},
      {5034, "CU_FILE_IO_DISABLED"},
      {5035, "CU_FILE_BATCH_SUBMIT_FAILED"},
      {5036, "CU_FILE_GPU_MEMORY_PINNING_FAILED"},
      {5037, "CU_FILE_BATCH_FULL"},
      {5038, "CU_FILE_ASYNC_NOT_SUPPORTED"},
  };
  for (const auto &entry : kNames) {
    if (entry.value == err) {
      return std::string(entry.name) + " (" + std::to_string(err) + ")";
    }
  }
  return "cuFile error " + std::to_string(err);
}

Library::Library(const std::string &name) {
  const auto started = phxtools::Clock::now();
  lib_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  load_us_ = phxtools::us_since(started);
  if (lib_ == nullptr) {
    const char *why = dlerror();  // NOLINT(concurrency-mt-unsafe): one thread loads it
    throw std::runtime_error("dlopen(" + name + "): " + (why != nullptr ? why : "failed"));
  }
  try {
    bind(lib_, name, "cuFileDriverOpen", driver_open);
    bind(lib_, name, "cuFileDriverClose", driver_close);
    bind(lib_, name, "cuFileGetVersion", get_version);
    bind(lib_, name, "cuFileHandleRegister", handle_register);
    bind(lib_, name, "cuFileHandleDeregister", handle_deregister);
    bind(lib_, name, "cuFileBufRegister", buf_register);
    bind(lib_, name, "cuFileBufDeregister", buf_deregister);
    bind(lib_, name, "cuFileRead", read);
  } catch (...) {
    dlclose(lib_);
    throw;
  }
  Dl_info info{};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): dladdr takes the address
  if (dladdr(reinterpret_cast<void *>(driver_open), &info) != 0 && info.dli_fname != nullptr) {
    path_ = info.dli_fname;
  } else {
    path_ = name;
  }
  implementation_ = dlsym(lib_, "phx_cufile_last_error") != nullptr ? "phoenix" : "nvidia";
}

Library::~Library() {
  // Left loaded: NVIDIA's library keeps threads and atexit handlers that
  // must not outlive its code.
  lib_ = nullptr;
}

}  // namespace phxcufile
