/* SPDX-License-Identifier: MIT */
/*
 * A CPU stand-in for the part of the CUDA driver API libphoenix uses, so
 * the compat engine, the compat gather and stream-ordered I/O run in CI
 * (and under ASan and TSan) on machines without a GPU.  Tests point
 * PHX_CUDA_DRIVER at libphx_fakecuda.so; libphoenix then dlopens it in
 * place of libcuda.so.1.
 *
 * What it keeps honest:
 *  - device memory is a memfd mapped twice: PROT_NONE at the address
 *    handed out (a CPU access by the library faults, as it would on a GPU)
 *    and read-write at an alias that only the "copy engine" uses;
 *  - every stream is a worker thread that runs its operations in order,
 *    asynchronously from the caller (optionally slowed down), so a missing
 *    wait on an event or stream shows up as wrong bytes;
 *  - cuMemFreeHost waits for the work in every stream first, as CUDA's
 *    implicit synchronisation does;
 *  - calls that need a current context fail with CUDA_ERROR_INVALID_CONTEXT
 *    without one, and every handle is counted so tests can check for leaks.
 *
 * Below: the control API for tests (not part of CUDA's).
 */
#ifndef PHOENIX_TESTS_FAKE_CUDA_H
#define PHOENIX_TESTS_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/** Live handles and allocations, for leak checks. */
struct phx_fake_cuda_counts {
  long streams;         /* created by cuStreamCreate, not yet destroyed */
  long events;          /* created, not yet destroyed */
  long device_allocs;   /* cuMemAlloc without cuMemFree */
  long host_allocs;     /* pinned host ranges: cuMemHostAlloc without cuMemFreeHost,
                           and cuMemHostRegister without cuMemHostUnregister */
  long contexts;        /* primary-context retains without release */
  long copies;          /* asynchronous copies run so far */
  long copy_batches;    /* cuMemcpyBatchAsync calls accepted so far */
  long host_registered; /* those of host_allocs that cuMemHostRegister made */
  long sync_gave_up;    /* implicit synchronisations (cuMemFreeHost) that waited 20 s
                           for a stream and gave up: on a GPU, a hang */
};
void phx_fake_cuda_get_counts(struct phx_fake_cuda_counts *out);

/** 0: cuMemcpyBatchAsync_v2 returns CUDA_ERROR_NOT_SUPPORTED, as on a
 *  driver or platform without batched copies; 1 (the default): it works. */
void phx_fake_cuda_set_batches_supported(int supported);

/** Every stream operation waits this long before it runs (0: none). */
void phx_fake_cuda_set_op_delay_us(unsigned delay_us);

/**
 * The @nth next call (1 = the next one) of the entry point @call (e.g.
 * "cuMemcpyHtoDAsync") returns @error instead of doing anything.  One
 * failure per entry point: several entry points can each have one.
 */
void phx_fake_cuda_fail_call(const char *call, unsigned nth, int error);

/**
 * As phx_fake_cuda_fail_call(), but the failing call first sleeps
 * @delay_us: work on other threads gets ahead of the failure.
 */
void phx_fake_cuda_fail_call_after(const char *call, unsigned nth, int error, unsigned delay_us);

/** Clears the failures set by phx_fake_cuda_fail_call(). */
void phx_fake_cuda_clear_failures(void);

/**
 * Enqueues a slow "kernel" on @stream: after @delay_us, @size bytes of
 * device memory at @dptr become @value.  Stands in for the GPU tests'
 * kernels in the stream-order tests.  Returns a CUresult.
 */
int phx_fake_cuda_enqueue_fill(struct CUstream_st *stream, unsigned long long dptr, size_t size,
                               uint8_t value, unsigned delay_us);

#ifdef __cplusplus
}
#endif

#endif /* PHOENIX_TESTS_FAKE_CUDA_H */
