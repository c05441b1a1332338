/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver entry points the C client tests use (device memory, its
 * copies, streams), from the driver libphoenix loads: PHX_CUDA_DRIVER (the
 * fake one, in CI) or libcuda.so.1 (a GPU).  One translation unit per test
 * includes it; load_cuda_driver() returns 1 once every entry point resolved.
 */
#ifndef PHOENIX_TESTS_CUDA_CLIENT_H
#define PHOENIX_TESTS_CUDA_CLIENT_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef unsigned long long CUdeviceptr;
struct CUctx_st;
struct CUstream_st;
static int (*cuInit)(unsigned flags);
static int (*cuDeviceGetCount)(int *count);
static int (*cuDevicePrimaryCtxRetain)(struct CUctx_st **context, int device);
static int (*cuCtxPushCurrent_v2)(struct CUctx_st *context);
static int (*cuMemAlloc_v2)(CUdeviceptr *pointer, size_t size);
static int (*cuMemFree_v2)(CUdeviceptr pointer);
static int (*cuMemcpyHtoD_v2)(CUdeviceptr to, const void *from, size_t size);
static int (*cuMemcpyDtoH_v2)(void *to, CUdeviceptr from, size_t size);
static int (*cuStreamCreate)(struct CUstream_st **stream, unsigned flags);
static int (*cuStreamSynchronize)(struct CUstream_st *stream);
static int (*cuStreamDestroy_v2)(struct CUstream_st *stream);

/* POSIX's way to take a function from dlsym in ISO C. */
#define PHX_CLIENT_LOAD(lib, fn) ((*(void **)&(fn) = dlsym(lib, #fn)) != NULL)

static inline int load_cuda_driver(void) {
  const char *name = getenv("PHX_CUDA_DRIVER");
  void *lib = dlopen(name != NULL ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return lib != NULL && PHX_CLIENT_LOAD(lib, cuInit) && PHX_CLIENT_LOAD(lib, cuDeviceGetCount) &&
         PHX_CLIENT_LOAD(lib, cuDevicePrimaryCtxRetain) &&
         PHX_CLIENT_LOAD(lib, cuCtxPushCurrent_v2) && PHX_CLIENT_LOAD(lib, cuMemAlloc_v2) &&
         PHX_CLIENT_LOAD(lib, cuMemFree_v2) && PHX_CLIENT_LOAD(lib, cuMemcpyHtoD_v2) &&
         PHX_CLIENT_LOAD(lib, cuMemcpyDtoH_v2) && PHX_CLIENT_LOAD(lib, cuStreamCreate) &&
         PHX_CLIENT_LOAD(lib, cuStreamSynchronize) && PHX_CLIENT_LOAD(lib, cuStreamDestroy_v2);
}

static inline CUdeviceptr dptr(const void *p) {
  return (CUdeviceptr)(uintptr_t)p;
}

#endif /* PHOENIX_TESTS_CUDA_CLIENT_H */
