/* SPDX-License-Identifier: MIT */
/*
 * cufile_abi.h - the cuFile C ABI that libphoenix-cufile (libcufile.so.0)
 * exports, declared from NVIDIA's published cuFile API reference
 * (docs.nvidia.com/gpudirect-storage/api-reference-guide) for the API
 * level of cuFile 1.15 (CUDA 13.0).  No NVIDIA header is needed to build;
 * nothing here is copied from one.  The names, values and layouts are the
 * ABI: a program compiled against NVIDIA's cufile.h calls these functions
 * with these structures, so every size and offset is checked below.
 *
 * Layouts (x86-64 / aarch64 LP64, as the reference documents the fields):
 *   CUfileError_t      { CUfileOpError err; CUresult cu_err; }            8 bytes
 *   CUfileDescr_t      { type; union { int fd; void *handle; }; fs_ops; } 24 bytes
 *   CUfileDrvProps_t   { nvfs { major, minor, poll_thresh_size,
 *                        max_direct_io_size, dstatusflags, dcontrolflags },
 *                        fflags, max_device_cache_size, per_buffer_cache_size,
 *                        max_device_pinned_mem_size, max_batch_io_size,
 *                        max_batch_io_timeout_msecs }                        56 bytes
 *   CUfileIOParams_t   { mode; union { batch { devPtr_base, file_offset,
 *                        devPtr_offset, size } } u; fh; opcode; cookie; }  64 bytes
 *   CUfileIOEvents_t   { cookie; status; ret; }                            24 bytes
 *
 * This header is the shim's own and its tests'; it is not installed.
 * Programs use NVIDIA's cufile.h (or none: kvikio, PyTorch) and link or
 * dlopen libcufile.so.0, which finds this library through LD_LIBRARY_PATH.
 */
#ifndef PHOENIX_CUFILE_SHIM_CUFILE_ABI_H
#define PHOENIX_CUFILE_SHIM_CUFILE_ABI_H

/* A C header: C++-only modernisations do not apply. */
/* NOLINTBEGIN(modernize-deprecated-headers, modernize-use-using) */
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CUFILE_SHIM_API __attribute__((visibility("default")))
#else
#define CUFILE_SHIM_API
#endif

struct CUstream_st;
typedef struct CUstream_st *CUstream;
/* cuda.h's CUresult is an int-sized enum; cu_err carries its value. */
typedef int CUresult;

#define CUFILEOP_BASE_ERR 5000

/* Callers may pass any int where an enum is declared: in C++ the enums get
 * int as their fixed underlying type, so every value is a valid one to read
 * (and refuse).  Same size and alignment as C's int-sized enums. */
#ifdef __cplusplus
#define CUFILE_ENUM_INT : int
#else
#define CUFILE_ENUM_INT
#endif

/* CUfileOpError: 0, or 5000 + n.  The I/O calls return its negation. */
typedef enum CUfileOpError CUFILE_ENUM_INT {
  CU_FILE_SUCCESS = 0,
  CU_FILE_DRIVER_NOT_INITIALIZED = 5001,
  CU_FILE_DRIVER_INVALID_PROPS = 5002,
  CU_FILE_DRIVER_UNSUPPORTED_LIMIT = 5003,
  CU_FILE_DRIVER_VERSION_MISMATCH = 5004,
  CU_FILE_DRIVER_VERSION_READ_ERROR = 5005,
  CU_FILE_DRIVER_CLOSING = 5006,
  CU_FILE_PLATFORM_NOT_SUPPORTED = 5007,
  CU_FILE_IO_NOT_SUPPORTED = 5008,
  CU_FILE_DEVICE_NOT_SUPPORTED = 5009,
  CU_FILE_NVFS_DRIVER_ERROR = 5010,
  CU_FILE_CUDA_DRIVER_ERROR = 5011,
  CU_FILE_CUDA_POINTER_INVALID = 5012,
  CU_FILE_CUDA_MEMORY_TYPE_INVALID = 5013,
  CU_FILE_CUDA_POINTER_RANGE_ERROR = 5014,
  CU_FILE_CUDA_CONTEXT_MISMATCH = 5015,
  CU_FILE_INVALID_MAPPING_SIZE = 5016,
  CU_FILE_INVALID_MAPPING_RANGE = 5017,
  CU_FILE_INVALID_FILE_TYPE = 5018,
  CU_FILE_INVALID_FILE_OPEN_FLAG = 5019,
  CU_FILE_DIO_NOT_SET = 5020,
  CU_FILE_INVALID_VALUE = 5022,
  CU_FILE_MEMORY_ALREADY_REGISTERED = 5023,
  CU_FILE_MEMORY_NOT_REGISTERED = 5024,
  CU_FILE_PERMISSION_DENIED = 5025,
  CU_FILE_DRIVER_ALREADY_OPEN = 5026,
  CU_FILE_HANDLE_NOT_REGISTERED = 5027,
  CU_FILE_HANDLE_ALREADY_REGISTERED = 5028,
  CU_FILE_DEVICE_NOT_FOUND = 5029,
  CU_FILE_INTERNAL_ERROR = 5030,
  CU_FILE_GETNEWFD_FAILED = 5031,
  CU_FILE_NVFS_SETUP_ERROR = 5033,
  CU_FILE_IO_DISABLED = 5034,
  CU_FILE_BATCH_SUBMIT_FAILED = 5035,
  CU_FILE_GPU_MEMORY_PINNING_FAILED = 5036,
  CU_FILE_BATCH_FULL = 5037,
  CU_FILE_ASYNC_NOT_SUPPORTED = 5038,
  CU_FILE_IO_MAX_ERROR = 5039
} CUfileOpError;

typedef struct CUfileError {
  CUfileOpError err;
  CUresult cu_err;
} CUfileError_t;

/* Bit numbers in CUfileDrvProps_t.nvfs.dstatusflags. */
typedef enum CUfileDriverStatusFlags CUFILE_ENUM_INT {
  CU_FILE_LUSTRE_SUPPORTED = 0,
  CU_FILE_WEKAFS_SUPPORTED = 1,
  CU_FILE_NFS_SUPPORTED = 2,
  CU_FILE_GPFS_SUPPORTED = 3,
  CU_FILE_NVME_SUPPORTED = 4,
  CU_FILE_NVMEOF_SUPPORTED = 5,
  CU_FILE_SCSI_SUPPORTED = 6,
  CU_FILE_SCALEFLUX_CSD_SUPPORTED = 7,
  CU_FILE_NVMESH_SUPPORTED = 8,
  CU_FILE_BEEGFS_SUPPORTED = 9,
  CU_FILE_NVME_P2P_SUPPORTED = 11
} CUfileDriverStatusFlags_t;

/* Bit numbers in CUfileDrvProps_t.nvfs.dcontrolflags. */
typedef enum CUfileDriverControlFlags CUFILE_ENUM_INT {
  CU_FILE_USE_POLL_MODE = 0,
  CU_FILE_ALLOW_COMPAT_MODE = 1
} CUfileDriverControlFlags_t;

/* Bit numbers in CUfileDrvProps_t.fflags. */
typedef enum CUfileFeatureFlags CUFILE_ENUM_INT {
  CU_FILE_DYN_ROUTING_SUPPORTED = 0,
  CU_FILE_BATCH_IO_SUPPORTED = 1,
  CU_FILE_STREAMS_SUPPORTED = 2,
  CU_FILE_PARALLEL_IO_SUPPORTED = 3
} CUfileFeatureFlags_t;

typedef struct CUfileDrvProps {
  struct {
    unsigned int major_version;
    unsigned int minor_version;
    size_t poll_thresh_size;   /* KiB */
    size_t max_direct_io_size; /* KiB */
    unsigned int dstatusflags;
    unsigned int dcontrolflags;
  } nvfs;
  unsigned int fflags;
  unsigned int max_device_cache_size;      /* KiB */
  unsigned int per_buffer_cache_size;      /* KiB */
  unsigned int max_device_pinned_mem_size; /* KiB */
  unsigned int max_batch_io_size;
  unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

typedef enum CUfileFileHandleType CUFILE_ENUM_INT {
  CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1,
  CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 = 2,
  CU_FILE_HANDLE_TYPE_USERSPACE_FS = 3
} CUfileFileHandleType;

struct sockaddr;
typedef struct CUfileRDMAInfo {
  int version;
  int desc_len;
  const char *desc_str;
} cufileRDMAInfo_t;

/* Operations of a user-space file system; the shim serves none. */
typedef struct CUfileFSOps {
  const char *(*fs_type)(void *handle);
  int (*getRDMADeviceList)(void *handle, struct sockaddr **hostaddrs);
  int (*getRDMADevicePriority)(void *handle, char *, size_t, loff_t, struct sockaddr *hostaddr);
  ssize_t (*read)(void *handle, char *, size_t, loff_t, cufileRDMAInfo_t *);
  ssize_t (*write)(void *handle, const char *, size_t, loff_t, cufileRDMAInfo_t *);
} CUfileFSOps_t;

typedef struct CUfileDescr_t {
  CUfileFileHandleType type;
  union {
    int fd;
    void *handle;
  } handle;
  const CUfileFSOps_t *fs_ops;
} CUfileDescr_t;

typedef void *CUfileHandle_t;
typedef void *CUfileBatchHandle_t;

typedef enum CUfileOpcode CUFILE_ENUM_INT { CUFILE_READ = 0, CUFILE_WRITE = 1 } CUfileOpcode_t;

typedef enum CUFILEStatus_enum CUFILE_ENUM_INT {
  CUFILE_WAITING = 0x000001,
  CUFILE_PENDING = 0x000002,
  CUFILE_INVALID = 0x000004,
  CUFILE_CANCELED = 0x000008,
  CUFILE_COMPLETE = 0x000010,
  CUFILE_TIMEOUT = 0x000020,
  CUFILE_FAILED = 0x000040
} CUfileStatus_t;

typedef enum cufileBatchMode CUFILE_ENUM_INT { CUFILE_BATCH = 1 } CUfileBatchMode_t;

typedef struct CUfileIOParams {
  CUfileBatchMode_t mode;
  union {
    struct {
      void *devPtr_base;
      off_t file_offset;
      off_t devPtr_offset;
      size_t size;
    } batch;
  } u;
  CUfileHandle_t fh;
  CUfileOpcode_t opcode;
  void *cookie;
} CUfileIOParams_t;

typedef struct CUfileIOEvents {
  void *cookie;
  CUfileStatus_t status;
  size_t ret;
} CUfileIOEvents_t;

/* cuFileBufRegister flags. */
#define CU_FILE_RDMA_REGISTER 1
#define CU_FILE_RDMA_RELAXED_ORDERING 2

/* cuFileStreamRegister flags: which parameters are known at submission. */
#define CU_FILE_STREAM_FIXED_BUF_OFFSET 1
#define CU_FILE_STREAM_FIXED_FILE_OFFSET 2
#define CU_FILE_STREAM_FIXED_FILE_SIZE 4
#define CU_FILE_STREAM_PAGE_ALIGNED_INPUTS 8

/* Driver. */
CUFILE_SHIM_API CUfileError_t cuFileDriverOpen(void);
CUFILE_SHIM_API CUfileError_t cuFileDriverClose(void);
CUFILE_SHIM_API CUfileError_t cuFileDriverClose_v2(void);
CUFILE_SHIM_API long cuFileUseCount(void);
CUFILE_SHIM_API CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props);
CUFILE_SHIM_API CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size);
CUFILE_SHIM_API CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size);
CUFILE_SHIM_API CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size);
CUFILE_SHIM_API CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size);
CUFILE_SHIM_API CUfileError_t cuFileGetVersion(int *version);

/* Handles and buffers. */
CUFILE_SHIM_API CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr);
CUFILE_SHIM_API void cuFileHandleDeregister(CUfileHandle_t fh);
CUFILE_SHIM_API CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags);
CUFILE_SHIM_API CUfileError_t cuFileBufDeregister(const void *bufPtr_base);

/* Synchronous I/O: bytes done (short only at end of file), -1 with errno for
 * a file system error, or -CUfileOpError. */
CUFILE_SHIM_API ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size,
                                   off_t file_offset, off_t bufPtr_offset);
CUFILE_SHIM_API ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size,
                                    off_t file_offset, off_t bufPtr_offset);

/* Stream-ordered I/O. */
CUFILE_SHIM_API CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
                                              off_t *file_offset_p, off_t *bufPtr_offset_p,
                                              ssize_t *bytes_read_p, CUstream stream);
CUFILE_SHIM_API CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p,
                                               off_t *file_offset_p, off_t *bufPtr_offset_p,
                                               ssize_t *bytes_written_p, CUstream stream);
CUFILE_SHIM_API CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags);
CUFILE_SHIM_API CUfileError_t cuFileStreamDeregister(CUstream stream);

/* Batch I/O. */
CUFILE_SHIM_API CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr);
CUFILE_SHIM_API CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr,
                                                  CUfileIOParams_t *iocbp, unsigned flags);
CUFILE_SHIM_API CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr,
                                                     unsigned *nr, CUfileIOEvents_t *iocbp,
                                                     struct timespec *timeout);
CUFILE_SHIM_API CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp);
CUFILE_SHIM_API void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp);

/* The layouts above, as the ABI fixes them (LP64). */
#ifdef __cplusplus
#define CUFILE_ABI_ASSERT(cond, what) static_assert(cond, what)
#else
#define CUFILE_ABI_ASSERT(cond, what) _Static_assert(cond, what)
#endif
CUFILE_ABI_ASSERT(sizeof(CUfileOpError) == 4, "CUfileOpError is an int-sized enum");
CUFILE_ABI_ASSERT(sizeof(CUfileError_t) == 8, "CUfileError_t");
CUFILE_ABI_ASSERT(offsetof(CUfileError_t, cu_err) == 4, "CUfileError_t.cu_err");
CUFILE_ABI_ASSERT(sizeof(CUfileDescr_t) == 24, "CUfileDescr_t");
CUFILE_ABI_ASSERT(offsetof(CUfileDescr_t, handle) == 8, "CUfileDescr_t.handle");
CUFILE_ABI_ASSERT(offsetof(CUfileDescr_t, fs_ops) == 16, "CUfileDescr_t.fs_ops");
CUFILE_ABI_ASSERT(sizeof(CUfileDrvProps_t) == 56, "CUfileDrvProps_t");
CUFILE_ABI_ASSERT(offsetof(CUfileDrvProps_t, nvfs.poll_thresh_size) == 8, "nvfs.poll_thresh_size");
CUFILE_ABI_ASSERT(offsetof(CUfileDrvProps_t, nvfs.dstatusflags) == 24, "nvfs.dstatusflags");
CUFILE_ABI_ASSERT(offsetof(CUfileDrvProps_t, fflags) == 32, "CUfileDrvProps_t.fflags");
CUFILE_ABI_ASSERT(offsetof(CUfileDrvProps_t, max_batch_io_size) == 48, "max_batch_io_size");
CUFILE_ABI_ASSERT(offsetof(CUfileDrvProps_t, max_batch_io_timeout_msecs) == 52,
                  "max_batch_io_timeout_msecs");
CUFILE_ABI_ASSERT(sizeof(CUfileIOParams_t) == 64, "CUfileIOParams_t");
CUFILE_ABI_ASSERT(offsetof(CUfileIOParams_t, u.batch.devPtr_base) == 8, "u.batch.devPtr_base");
CUFILE_ABI_ASSERT(offsetof(CUfileIOParams_t, u.batch.file_offset) == 16, "u.batch.file_offset");
CUFILE_ABI_ASSERT(offsetof(CUfileIOParams_t, u.batch.devPtr_offset) == 24, "u.batch.devPtr_offset");
CUFILE_ABI_ASSERT(offsetof(CUfileIOParams_t, u.batch.size) == 32, "u.batch.size");
CUFILE_ABI_ASSERT(offsetof(CUfileIOParams_t, fh) == 40, "CUfileIOParams_t.fh");
CUFILE_ABI_ASSERT(offsetof(CUfileIOParams_t, opcode) == 48, "CUfileIOParams_t.opcode");
CUFILE_ABI_ASSERT(offsetof(CUfileIOParams_t, cookie) == 56, "CUfileIOParams_t.cookie");
CUFILE_ABI_ASSERT(sizeof(CUfileIOEvents_t) == 24, "CUfileIOEvents_t");
CUFILE_ABI_ASSERT(offsetof(CUfileIOEvents_t, status) == 8, "CUfileIOEvents_t.status");
CUFILE_ABI_ASSERT(offsetof(CUfileIOEvents_t, ret) == 16, "CUfileIOEvents_t.ret");
#undef CUFILE_ABI_ASSERT

#ifdef __cplusplus
}
#endif

/* NOLINTEND(modernize-deprecated-headers, modernize-use-using) */
#endif /* PHOENIX_CUFILE_SHIM_CUFILE_ABI_H */
