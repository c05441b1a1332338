// SPDX-License-Identifier: MIT
// cuFileDriver*, cuFileGetVersion, cuFileUseCount.  Opening costs nothing
// here (devices open at first use), where NVIDIA's takes 0.2-0.5 s.
#include "cufile_shim/cufile_abi.h"
#include "cufile_shim/errors.hpp"
#include "cufile_shim/settings.hpp"
#include "cufile_shim/shim_state.hpp"
#include "phoenix/config.h"

using phx::cufile_shim::guarded;
using phx::cufile_shim::Shim;
using phx::cufile_shim::ShimError;
using phx::cufile_shim::status;

namespace {

/// cuFile 1.15 (CUDA 13.0): the API level these declarations follow.
/// kvikio enables batches at >= 1060 and streams at >= 1070.
constexpr int kCuFileVersion = 1150;

unsigned clamp_u32(std::size_t v) {
  return v > 0xffffffffU ? 0xffffffffU : static_cast<unsigned>(v);
}

}  // namespace

CUfileError_t cuFileDriverOpen(void) {
  return guarded("cuFileDriverOpen", [] {
    Shim::get().open();
    return status(CU_FILE_SUCCESS);
  });
}

CUfileError_t cuFileDriverClose_v2(void) {
  return guarded("cuFileDriverClose", [] { return status(Shim::get().close()); });
}

CUfileError_t cuFileDriverClose(void) {
  return cuFileDriverClose_v2();
}

long cuFileUseCount(void) {
  try {
    return Shim::get().use_count();
  } catch (...) {
    return 0;
  }
}

CUfileError_t cuFileGetVersion(int *version) {
  return guarded("cuFileGetVersion", [version] {
    if (version == nullptr) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null version");
    }
    *version = kCuFileVersion;
    return status(CU_FILE_SUCCESS);
  });
}

CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props) {
  return guarded("cuFileDriverGetProperties", [props] {
    if (props == nullptr) {
      throw ShimError(CU_FILE_INVALID_VALUE, "null properties");
    }
    Shim::get().ensure_open();
    const auto t = phx::cufile_shim::tunables();
    *props = CUfileDrvProps_t{};
    // "nvfs" is Phoenix here: its version, and what it serves (NVMe, with
    // peer-to-peer DMA where phxfs.ko serves the GPU).
    props->nvfs.major_version = PHOENIX_VERSION_MAJOR;
    props->nvfs.minor_version = PHOENIX_VERSION_MINOR;
    props->nvfs.poll_thresh_size = t.poll_threshold_kib;
    props->nvfs.max_direct_io_size = t.max_direct_io_kib;
    props->nvfs.dstatusflags = (1U << CU_FILE_NVME_SUPPORTED) | (1U << CU_FILE_NVME_P2P_SUPPORTED);
    props->nvfs.dcontrolflags =
        (t.poll_mode ? 1U << CU_FILE_USE_POLL_MODE : 0U) | (1U << CU_FILE_ALLOW_COMPAT_MODE);
    props->fflags = (1U << CU_FILE_BATCH_IO_SUPPORTED) | (1U << CU_FILE_STREAMS_SUPPORTED);
    props->max_device_cache_size = clamp_u32(t.max_cache_kib);
    props->per_buffer_cache_size = clamp_u32(t.max_cache_kib);
    props->max_device_pinned_mem_size = clamp_u32(t.max_pinned_kib);
    props->max_batch_io_size = phx::cufile_shim::settings().max_batch_entries;
    props->max_batch_io_timeout_msecs = 0;
    return status(CU_FILE_SUCCESS);
  });
}

CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size) {
  phx::cufile_shim::set_poll_mode(poll, poll_threshold_size);
  return status(CU_FILE_SUCCESS);
}

CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size) {
  if (max_direct_io_size == 0) {
    return status(CU_FILE_INVALID_VALUE);
  }
  phx::cufile_shim::set_max_direct_io(max_direct_io_size);
  return status(CU_FILE_SUCCESS);
}

CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size) {
  phx::cufile_shim::set_max_cache(max_cache_size);
  return status(CU_FILE_SUCCESS);
}

CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size) {
  phx::cufile_shim::set_max_pinned(max_pinned_size);
  return status(CU_FILE_SUCCESS);
}
