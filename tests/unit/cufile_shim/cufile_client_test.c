/* SPDX-License-Identifier: MIT */
/*
 * The cuFile client (cufile_client.c) on CUDA: the fake driver in CI, a
 * real GPU under scripts/gpu-check (without PHX_CUDA_DRIVER it loads
 * libcuda.so.1); device memory is checked through the driver's own copies.
 * Fake GPUs: CUDA ordinal 1 is Phoenix device 0 and ordinal 0 is device 1
 * (their PCI order is reversed), so buffers on both exercise the shim's
 * pointer-to-device mapping.
 *
 * --no-cuda: no CUDA driver may load (PHX_CUDA_DRIVER names a missing
 * library), so the shim resolves every buffer without one; on a machine
 * without phxfs libphoenix then picks its host engine, whose device memory
 * is this process's memory, checked directly.
 *
 * Exits 0 on success, 1 on a failure, 77 to skip.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../cuda_client.h"
#include "cufile_client.h"

static int gpus;

/* Buffer 0 on ordinal 1 (Phoenix device 0 on the fake driver), 1 on ordinal 0. */
static void *cuda_alloc(int which, size_t size) {
  struct CUctx_st *ctx = NULL;
  CUdeviceptr p = 0;
  const int ordinal = which == 0 && gpus > 1 ? 1 : 0;
  if (cuDevicePrimaryCtxRetain(&ctx, ordinal) != 0 || cuCtxPushCurrent_v2(ctx) != 0 ||
      cuMemAlloc_v2(&p, size) != 0) {
    return NULL;
  }
  return (void *)(uintptr_t)p;
}

static void cuda_release(void *device, size_t size) {
  (void)size;
  cuMemFree_v2(dptr(device));
}

static int cuda_to_host(void *host, const void *device, size_t size) {
  return cuMemcpyDtoH_v2(host, dptr(device), size);
}

static int cuda_from_host(void *device, const void *host, size_t size) {
  return cuMemcpyHtoD_v2(dptr(device), host, size);
}

static void *cuda_stream_create(void) {
  struct CUstream_st *stream = NULL;
  return cuStreamCreate(&stream, 0) == 0 ? stream : NULL;
}

static int cuda_stream_sync(void *stream) {
  return cuStreamSynchronize(stream);
}

static void cuda_stream_destroy(void *stream) {
  cuStreamDestroy_v2(stream);
}

/* --no-cuda: device memory is this process's memory (the host engine's). */
static void *host_alloc(int which, size_t size) {
  (void)which;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void host_release(void *device, size_t size) {
  munmap(device, size);
}

static int host_copy(void *to, const void *from, size_t size) {
  memcpy(to, from, size);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--no-cuda") == 0) {
    if (load_cuda_driver()) {
      fprintf(stderr,
              "SKIP: --no-cuda, but a CUDA driver loads (set PHX_CUDA_DRIVER to a "
              "missing library)\n");
      return 77;
    }
    const struct cufile_platform host = {
        .name = "host memory without CUDA",
        .alloc = host_alloc,
        .release = host_release,
        .to_host = host_copy,
        .from_host = host_copy,
    };
    return cufile_client_run(&host);
  }
  if (!load_cuda_driver() || cuInit(0) != 0 || cuDeviceGetCount(&gpus) != 0 || gpus < 1) {
    fprintf(stderr, "SKIP: no CUDA driver or no GPU\n");
    return 77;
  }
  /* Host memory the shim must refuse. */
  void *host = malloc(4096);
  struct cufile_platform cuda = {
      .name = "CUDA",
      .alloc = cuda_alloc,
      .release = cuda_release,
      .to_host = cuda_to_host,
      .from_host = cuda_from_host,
      .stream_create = cuda_stream_create,
      .stream_sync = cuda_stream_sync,
      .stream_destroy = cuda_stream_destroy,
      .not_device = {host, NULL},
  };
  /* The edge: 100 bytes before the end of an allocation of its own. */
  void *edge = cuda_alloc(1, 8192);
  cuda.edge = edge != NULL ? (const unsigned char *)edge + 8192 - 100 : NULL;
  const int rc = cufile_client_run(&cuda);
  if (edge != NULL) {
    cuda_release(edge, 8192);
  }
  free(host);
  return rc;
}
