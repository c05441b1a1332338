/* SPDX-License-Identifier: MIT */
/*
 * A cuFile client written in C against NVIDIA's documented API (declared
 * by the shim's cufile_abi.h), run on several platforms: the fake CUDA
 * driver and a real GPU (cufile_client_test.c), host memory without any
 * CUDA driver (the same file, --no-cuda), and the rig's PCI BAR standing in
 * for GPU memory over phxfs (tests/vm/cufile/cufile_rig.c).  A platform
 * provides device memory and a way to read and fill it that does not go
 * through the shim; the client does the rest.
 */
#ifndef PHX_TESTS_CUFILE_CLIENT_H
#define PHX_TESTS_CUFILE_CLIENT_H

#include <stddef.h>

struct cufile_platform {
  const char *name;
  /* Device memory: buffer 0 (registered) and 1 (not registered), each
   * kCufileClientBuffer bytes, on two GPUs where there are two. */
  void *(*alloc)(int which, size_t size);
  void (*release)(void *device, size_t size);
  /* Device bytes <-> host memory, not through the shim.  to_host is called
   * after every buffer is deregistered and the driver closed; from_host
   * before any registration. */
  int (*to_host)(void *host, const void *device, size_t size);
  int (*from_host)(void *device, const void *host, size_t size);
  /* Streams; null: none (stream-ordered I/O is tried on the null stream,
   * and the client accepts the shim's CU_FILE_ASYNC_NOT_SUPPORTED). */
  void *(*stream_create)(void);
  int (*stream_sync)(void *stream);
  void (*stream_destroy)(void *stream);
  /* After a successful check of device bytes [device, +size) against the
   * file's [file_offset, +size): lets the rig's host compare them too. */
  void (*evidence)(const void *device, size_t size, const char *path, size_t file_offset);
  /* Where the test file goes (null: $TMPDIR or /tmp); keep it afterwards. */
  const char *dir;
  int keep_file;
  /* A device address with fewer than 4096 bytes of device memory after it
   * (the shim must say CU_FILE_CUDA_POINTER_RANGE_ERROR); null: skipped. */
  const void *edge;
  /* Host memory the shim must refuse as CU_FILE_CUDA_POINTER_INVALID. */
  const void *not_device[2];
};

enum { kCufileClientBuffer = 2 << 20 };

/* Runs every check; 0 when all passed, 1 otherwise. */
int cufile_client_run(const struct cufile_platform *p);

#endif /* PHX_TESTS_CUFILE_CLIENT_H */
