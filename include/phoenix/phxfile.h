/* SPDX-License-Identifier: MIT */
/*
 * libphxfile.so: the phxFile C ABI that LMCache's "phx" GDS backend
 * (lmcache/v1/gpu_connector/gds_backends/phx.py) loads with
 * ctypes.util.find_library("phxfile"), served by libphoenix: the direct
 * engine where phxfs serves the GPU, the compat engine elsewhere
 * (docs/lmcache.md).  The declarations follow the ABI LMCache calls;
 * the library is this project's own.
 *
 * Every call returns 0 on success or a negative errno; none blocks on I/O
 * except phxFileDriverClose (it waits for nothing in flight: registrations
 * in use by I/O stay alive until that I/O ends).  phxFileLastError() says
 * in words why the calling thread's last call failed.
 */
#ifndef PHOENIX_PHXFILE_H
#define PHOENIX_PHXFILE_H

/* A C header first: C++ includes it as one. */
/* NOLINTBEGIN(modernize-deprecated-headers) */
#include <stddef.h>
#include <stdint.h>
/* NOLINTEND(modernize-deprecated-headers) */

/* Exported from libphxfile.so, which hides everything else. */
#if defined(__GNUC__)
#define PHXFILE_API __attribute__((visibility("default")))
#else
#define PHXFILE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * phxFileDriverOpen - take a reference on the library's state.  Optional:
 * every other call opens it implicitly.  Returns 0.
 */
PHXFILE_API int phxFileDriverOpen(void);

/**
 * phxFileDriverClose - drop a reference; the last one (or the implicit one
 * of a process that never called phxFileDriverOpen) deregisters every
 * buffer still registered and closes the devices the library opened.
 * Registered file handles stay valid.  Returns 0.
 */
PHXFILE_API int phxFileDriverClose(void);

/**
 * phxFileBufRegister - register [@addr, @addr + @length) of CUDA device
 * memory for I/O; the device is the one CUDA says holds @addr.  No
 * alignment is required.  Ranges registered separately may be neighbours
 * inside one allocation.
 * Errors: -EINVAL null @addr or zero @length; -EFAULT host or managed
 * memory, or a range running past its allocation; -EEXIST @addr already
 * registered; -ENODEV no device for it; -ENOMEM.
 */
PHXFILE_API int phxFileBufRegister(const void *addr, size_t length);

/**
 * phxFileBufDeregister - undo phxFileBufRegister(@addr).  I/O still in
 * flight on the range keeps it registered until it ends.
 * Errors: -EINVAL @addr is not the start of a registered range.
 */
PHXFILE_API int phxFileBufDeregister(const void *addr);

/**
 * phxFileHandleRegister - a handle for I/O on @fd, opened O_DIRECT or not
 * (O_DIRECT descriptors read a range the page cache holds through it; see
 * docs/api.md's cache policy).  @fd stays the caller's: close it after
 * phxFileHandleDeregister().
 * Errors: -EINVAL null @fh, or @fd is not a regular file or block device;
 * -EBADF @fd is not open.
 */
PHXFILE_API int phxFileHandleRegister(void **fh, int fd);

/**
 * phxFileHandleDeregister - forget @fh; I/O in flight on it completes.
 * Errors: -EBADF @fh is not a registered handle.
 */
PHXFILE_API int phxFileHandleDeregister(void *fh);

/** phxFileStreamRegister - accepted and ignored (every I/O names its
 *  stream); returns 0. */
PHXFILE_API int phxFileStreamRegister(void *stream);

/** phxFileStreamDeregister - accepted and ignored; returns 0. */
PHXFILE_API int phxFileStreamDeregister(void *stream);

/**
 * phxFileReadAsync - read *@nbytes bytes at *@file_offset of @fh's file
 * into device memory at @buf_base + *@buf_offset, ordered on @stream (a
 * cudaStream_t; NULL is the legacy default stream): after the work already
 * enqueued on it, before the work enqueued after this call.  Returns once
 * enqueued; when the stream passes the read, *@bytes_done holds the bytes
 * read (fewer only at end of file) or a negative errno.  The values behind
 * @nbytes, @file_offset and @buf_offset are read by this call; *@bytes_done
 * must stay valid until the stream passes the read.  The target range must
 * be device memory inside one CUDA allocation (registered or not).
 * Errors (returned, nothing enqueued): -EINVAL a null pointer or a negative
 * offset; -EBADF @fh not registered; -EFAULT the target is not device
 * memory or runs past its allocation; -EOPNOTSUPP no CUDA here; -EIO.
 */
PHXFILE_API int phxFileReadAsync(void *fh, void *buf_base, size_t *nbytes, int64_t *file_offset,
                                 int64_t *buf_offset, int64_t *bytes_done, void *stream);

/** phxFileWriteAsync - the write counterpart of phxFileReadAsync(): the
 *  bytes are taken from device memory when @stream reaches the write. */
PHXFILE_API int phxFileWriteAsync(void *fh, void *buf_base, size_t *nbytes, int64_t *file_offset,
                                  int64_t *buf_offset, int64_t *bytes_done, void *stream);

/** phxFileLastError - why the calling thread's last phxFile call failed,
 *  in words ("" after a success).  Not part of LMCache's ABI. */
PHXFILE_API const char *phxFileLastError(void);

#ifdef __cplusplus
}
#endif

#endif /* PHOENIX_PHXFILE_H */
