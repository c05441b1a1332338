/* SPDX-License-Identifier: MIT */
/*
 * phoenix.h - libphoenix C API.
 *
 * Compatible with the Phoenix paper's API: open a device, register a range of
 * its memory, then read and write files straight into it.  Every function
 * returns -1 (or NULL) and sets errno on failure and never prints;
 * phxfs_last_error() gives a sentence naming what was wrong.
 *
 * Engines (see phoenix.hpp and docs/architecture.md):
 *   direct - /dev/phxfs_devN is present: registration maps the device pages,
 *            I/O is ordinary O_DIRECT I/O on that mapping (no host buffer);
 *   compat - a CUDA GPU without the module: reads go through pinned staging
 *            buffers and cudaMemcpyAsync on several threads and streams;
 *   host   - registered memory is ordinary host memory (the CPU baseline,
 *            and what runs on machines without the module or a GPU);
 *   cufile - NVIDIA's cuFile (GDS), loaded at run time, for comparisons.
 * PHX_ENGINE=direct|compat|host|cufile|auto picks one process-wide;
 * phxfs_open_engine() picks per device.
 *
 * Every engine serves phxfs_read/phxfs_write, and phxfs_read_async/
 * phxfs_write_async in builds with CUDA.  Only direct and host have a host
 * view: for compat and cufile, phxfs_regmem() returns @addr itself in
 * *target_addr.  phoenix.hpp's EngineCapabilities lists what each engine
 * can do.
 */
#ifndef PHOENIX_PHOENIX_H
#define PHOENIX_PHOENIX_H

/* A C header: C++-only modernisations do not apply. */
/* NOLINTBEGIN(modernize-deprecated-headers, modernize-use-using) */
#include <stddef.h>
#include <sys/types.h>

#include "phoenix/config.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PHXFS_API __attribute__((visibility("default")))
#define PHXFS_NODISCARD __attribute__((warn_unused_result))
#else
#define PHXFS_API
#define PHXFS_NODISCARD
#endif

/** Identifies a file for I/O: a descriptor the caller opened and the device
 *  whose registered memory the I/O targets. */
/* A CUDA stream: cudaStream_t and CUstream are pointers to this type. */
struct CUstream_st;

typedef struct phxfs_fileid {
  int fd;
  int deviceID;
} phxfs_fileid_t;

/** Engine choice for phxfs_open_engine(). */
typedef enum phxfs_engine {
  PHXFS_ENGINE_AUTO = 0, /**< PHX_ENGINE if set, else direct when the module serves the
                              device, else compat when it has a CUDA GPU, else host */
  PHXFS_ENGINE_DIRECT = 1,
  PHXFS_ENGINE_HOST = 2,
  PHXFS_ENGINE_COMPAT = 3, /**< CUDA GPU without the module; ENOTSUP in builds without CUDA */
  PHXFS_ENGINE_CUFILE = 4, /**< cuFile baseline; ENOTSUP when libcufile is absent */
  PHXFS_ENGINE_ERROR = -1, /**< returned by phxfs_device_engine() on failure */
  /* Makes every int a valid value, so a C caller's stray number reaches
   * the library as a value it can reject (EINVAL) rather than as UB. */
  PHXFS_ENGINE_FORCE_INT_ = 0x7fffffff
} phxfs_engine_t;

/**
 * phxfs_open - open device @device_id with the process default options
 * (phxfs_options_init(): the engine PHX_ENGINE names, auto when unset).
 * Opens are counted: opening an open device succeeds and shares it, with
 * the options it was first opened with; each open needs its phxfs_close().
 * Errors: EINVAL device_id out of [0, PHXFS_MAX_DEVICES) or PHX_ENGINE
 * invalid; EBUSY already open with another engine than the one asked for;
 * ENODEV direct engine forced but no /dev/phxfs_devN; EPROTO module speaks
 * another ABI; others from open(2).
 */
PHXFS_API PHXFS_NODISCARD int phxfs_open(int device_id);

/** phxfs_open_engine - as phxfs_open() with an explicit engine (AUTO defers
 *  to PHX_ENGINE, then to detection). ENOTSUP for an engine not built. */
PHXFS_API PHXFS_NODISCARD int phxfs_open_engine(int device_id, phxfs_engine_t engine);

/**
 * struct phxfs_options - a device's tunables: phx::Options in C.  Fill it
 * with phxfs_options_init() (the process defaults: built-in values with the
 * PHX_* environment applied, read once), change what you need, and pass it
 * to phxfs_open_options().  The fields, their variables and ranges are
 * phx::Options' (phoenix.hpp, docs/configuration.md).
 * @size: sizeof(struct phxfs_options) as the caller was compiled; lets
 *        later versions add fields at the end.
 */
/** How reads through a descriptor opened with O_DIRECT treat the page
 *  cache (PHX_READ_CACHE): AUTO reads a range the page cache holds (at
 *  least half of its pages) through a buffered descriptor of the same file
 *  and any other O_DIRECT; DESCRIPTOR reads as the descriptor was opened.
 *  The direct engine's memory is always read O_DIRECT. */
typedef enum phxfs_read_cache {
  PHXFS_READ_CACHE_AUTO = 0,
  PHXFS_READ_CACHE_DESCRIPTOR = 1,
} phxfs_read_cache_t;

typedef struct phxfs_options {
  size_t size;
  phxfs_engine_t engine;       /**< PHX_ENGINE */
  unsigned queue_depth;        /**< PHX_QUEUE_DEPTH: io_uring entries */
  size_t staging_bytes;        /**< PHX_STAGING_SIZE: bounce buffer per I/O thread */
  unsigned copy_threads;       /**< PHX_COPY_THREADS (compat) */
  unsigned copy_depth;         /**< PHX_COPY_DEPTH: chunks in flight per copy thread */
  size_t copy_chunk;           /**< PHX_COPY_CHUNK: buffered descriptors */
  size_t copy_direct_chunk;    /**< PHX_COPY_DIRECT_CHUNK: O_DIRECT descriptors */
  unsigned stream_workers;     /**< PHX_STREAM_WORKERS */
  size_t stream_staging_bytes; /**< PHX_STREAM_STAGING */
  phxfs_read_cache_t
      read_cache;        /**< PHX_READ_CACHE (added in 0.2: older callers' size ends before it) */
  unsigned copy_spin_us; /**< PHX_COPY_SPIN_US (added in 0.2, with read_cache) */
} phxfs_options_t;

/** phxfs_options_init - fill @options with the process defaults.  Errors:
 *  EINVAL null @options or a malformed PHX_* variable. */
PHXFS_API PHXFS_NODISCARD int phxfs_options_init(phxfs_options_t *options);

/**
 * phxfs_open_options - as phxfs_open() with @options.  Opening a device that
 * is already open succeeds only when @options equal the ones it was opened
 * with (engine AUTO matches any engine), else EBUSY.  Errors: EINVAL null
 * @options, a @size this library does not know, or a field out of range
 * (phxfs_last_error() names it); the errors of phxfs_open().
 */
PHXFS_API PHXFS_NODISCARD int phxfs_open_options(int device_id, const phxfs_options_t *options);

/**
 * phxfs_close - undo one phxfs_open(); the last one deregisters everything
 * still registered on @device_id and closes it.  Errors: EINVAL bad id;
 * ENODEV not open.
 */
PHXFS_API int phxfs_close(int device_id);

/**
 * phxfs_release_idle_engines - let go of the engines kept set up after
 * their devices closed.  A compat GPU's engine (copy threads, their streams
 * and pinned staging) outlives its last phxfs_close(), so that the next
 * open of that GPU finds it ready; one per device id, until this call or
 * the end of the process.  Engines a device still uses stop at its close.
 * Returns how many engines were idle and are stopped now.
 */
PHXFS_API int phxfs_release_idle_engines(void);

/** phxfs_device_engine - the engine serving an open device, or
 *  PHXFS_ENGINE_ERROR with errno EINVAL/ENODEV. */
PHXFS_API phxfs_engine_t phxfs_device_engine(int device_id);

/** phxfs_engine_name - "auto", "direct", "host", "compat", "cufile" or "unknown". */
PHXFS_API const char *phxfs_engine_name(phxfs_engine_t engine);

/**
 * phxfs_regmem - register [@addr, @addr + @len) of @device_id's memory.
 * @target_addr receives the host virtual address at which the range can be
 * passed to pread/pwrite/io_uring (the mapped device pages for the direct
 * engine; @addr itself for the host engine); engines without a host view
 * (compat, cufile) return @addr itself, for phxfs_read/phxfs_write only.
 * Errors: EINVAL null addr/target_addr, zero length, address overflow,
 * misalignment the engine cannot serve, or partial overlap with a live
 * registration; EEXIST the same range is already registered; EFAULT host
 * engine and the range is not mapped host memory (e.g. a GPU pointer);
 * ENODEV device not open; ENOMEM; errors of the module's REGISTER ioctl and
 * mmap.
 */
PHXFS_API PHXFS_NODISCARD int phxfs_regmem(int device_id, const void *addr, size_t len,
                                           void **target_addr);

/**
 * phxfs_deregmem - undo phxfs_regmem() of exactly [@addr, @addr + @len).
 * I/O still running on the range keeps it mapped until it ends.
 * Errors: EINVAL no registration with that start and length; ENODEV.
 */
PHXFS_API int phxfs_deregmem(int device_id, const void *addr, size_t len);

/**
 * phxfs_read - read @nbyte bytes at @f_offset of @fid.fd into registered
 * memory at @buf + @buf_offset (@buf is the device address given to
 * phxfs_regmem, or any address inside a registration).
 * Loops on short reads; any size (split internally); any alignment
 * (unaligned head/tail are staged when the descriptor has O_DIRECT).
 * Returns the bytes read: fewer than @nbyte only at end of file, or when an
 * error stopped the transfer after partial progress (POSIX convention: the
 * count is returned, errno and phxfs_last_error() say what stopped it, and
 * the next call reports the error).
 * Errors: EINVAL null buf, negative offsets or overflow; EBADF bad fd;
 * EFAULT target range not inside one registration; ENODEV device not open;
 * errors of pread(2).
 */
PHXFS_API PHXFS_NODISCARD ssize_t phxfs_read(phxfs_fileid_t fid, void *buf, off_t buf_offset,
                                             size_t nbyte, off_t f_offset);

/** phxfs_write - the write counterpart of phxfs_read(); returns @nbyte
 *  unless an error occurs (ENOSPC, EFBIG, EBADF...). */
PHXFS_API PHXFS_NODISCARD ssize_t phxfs_write(phxfs_fileid_t fid, const void *buf, off_t buf_offset,
                                              size_t nbyte, off_t f_offset);

/**
 * phxfs_read_async - stream-ordered phxfs_read(): reads @nbytes at @f_offset
 * of @fid.fd into registered memory at @buf once the work already enqueued
 * on @stream (a cudaStream_t; NULL is the legacy default stream) is done,
 * and makes the stream's later work wait for the read.  Returns 0 once
 * enqueued; when the stream passes the read, *@bytes_done (may be NULL)
 * holds the bytes read (short only at end of file) or -errno.  @fid.fd, the
 * registration and *@bytes_done must stay valid until then.  Reads on
 * different streams run concurrently, on at most 16 I/O threads per device
 * by default (more wait their turn, oldest first).  With the compat engine
 * the call may block until earlier stream-ordered I/Os of the device give
 * back pinned staging (256 MiB per device by default), so a stream must
 * not wait, through host code, for an I/O enqueued after its own.  The
 * compat engine reads the file early (before the stream gets there) while
 * no stream-ordered write is pending in the process; the bytes still reach
 * device memory in stream order (docs/architecture.md).
 * Errors: as phxfs_read(); ENOTSUP in a build or on a machine without CUDA;
 * EINVAL a stream capturing a CUDA graph; EIO CUDA errors.
 */
PHXFS_API PHXFS_NODISCARD int phxfs_read_async(phxfs_fileid_t fid, void *buf, size_t nbytes,
                                               off_t f_offset, ssize_t *bytes_done,
                                               struct CUstream_st *stream);

/** phxfs_write_async - the write counterpart of phxfs_read_async(). */
PHXFS_API PHXFS_NODISCARD int phxfs_write_async(phxfs_fileid_t fid, const void *buf, size_t nbytes,
                                                off_t f_offset, ssize_t *bytes_done,
                                                struct CUstream_st *stream);

/**
 * phxfs_strerror - thread-safe description of @errnum in Phoenix's terms
 * (e.g. ENODEV: "device not open or phxfs module not loaded").
 */
PHXFS_API const char *phxfs_strerror(int errnum);

/** phxfs_last_error - the calling thread's last failure as a sentence naming
 *  the call and its arguments; "" when none.  Valid until the next call. */
PHXFS_API const char *phxfs_last_error(void);

/** phxfs_version - library version string, e.g. "0.1.0". */
PHXFS_API const char *phxfs_version(void);

#ifdef __cplusplus
}
#endif

/* NOLINTEND(modernize-deprecated-headers, modernize-use-using) */
#endif /* PHOENIX_PHOENIX_H */
