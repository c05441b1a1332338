/* SPDX-License-Identifier: MIT */
/*
 * A cuFile client written in C against NVIDIA's documented API (declared
 * by the shim's cufile_abi.h), run on libphoenix-cufile over the fake CUDA
 * driver: device memory is checked byte for byte through the driver's own
 * copies.  Exits 0 on success, 1 on a failure, 77 to skip.
 *
 * The same program runs on a GPU (scripts/gpu-check): without
 * PHX_CUDA_DRIVER it loads libcuda.so.1.  Fake GPUs: CUDA ordinal 1 is
 * Phoenix device 0 and ordinal 0 is device 1 (their PCI order is
 * reversed), so buffers on both exercise the shim's pointer-to-device
 * mapping.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cufile_shim/cufile_abi.h"

/* The CUDA driver entry points the test uses, from the driver libphoenix
 * loads: PHX_CUDA_DRIVER (the fake, in CI) or libcuda.so.1 (a GPU). */
typedef unsigned long long CUdeviceptr;
struct CUctx_st;
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

static int load_driver(void) {
  const char *name = getenv("PHX_CUDA_DRIVER");
  void *lib = dlopen(name != NULL ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    return 0;
  }
  /* POSIX's way to take a function from dlsym in ISO C. */
#define LOAD(fn) (*(void **)&(fn) = dlsym(lib, #fn)) != NULL
  return LOAD(cuInit) && LOAD(cuDeviceGetCount) && LOAD(cuDevicePrimaryCtxRetain) &&
         LOAD(cuCtxPushCurrent_v2) && LOAD(cuMemAlloc_v2) && LOAD(cuMemFree_v2) &&
         LOAD(cuMemcpyHtoD_v2) && LOAD(cuMemcpyDtoH_v2) && LOAD(cuStreamCreate) &&
         LOAD(cuStreamSynchronize) && LOAD(cuStreamDestroy_v2);
#undef LOAD
}

const char *phx_cufile_last_error(void);

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, " [shim: %s]\n", phx_cufile_last_error());               \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

#define CHECK_STATUS(call, expected)                                               \
  do {                                                                             \
    CUfileError_t s_ = (call);                                                     \
    CHECK(s_.err == (expected), "%s returned %d, expected %d", #call, (int)s_.err, \
          (int)(expected));                                                        \
  } while (0)

enum { kFileSize = (1 << 20) + 123, kBuf = 1 << 20, kBatch = 256 };

static unsigned char file_byte(size_t offset) {
  return (unsigned char)(offset * 7 + offset / 251 + 1);
}

static void *dev_alloc(int ordinal, size_t size) {
  struct CUctx_st *ctx = NULL;
  CUdeviceptr p = 0;
  if (cuDevicePrimaryCtxRetain(&ctx, ordinal) != 0 || cuCtxPushCurrent_v2(ctx) != 0 ||
      cuMemAlloc_v2(&p, size) != 0) {
    return NULL;
  }
  return (void *)(uintptr_t)p;
}

static CUdeviceptr dptr(const void *p, size_t offset) {
  return (CUdeviceptr)(uintptr_t)p + offset;
}

/* Device bytes [offset, +size) of @p equal the file's bytes from @file_offset. */
static int device_matches_file(const void *p, size_t offset, size_t size, size_t file_offset) {
  unsigned char *host = malloc(size);
  int ok = host != NULL && cuMemcpyDtoH_v2(host, dptr(p, offset), size) == 0;
  for (size_t i = 0; ok && i < size; ++i) {
    if (host[i] != file_byte(file_offset + i)) {
      fprintf(stderr, "byte %zu: device %u, file %u\n", i, host[i], file_byte(file_offset + i));
      ok = 0;
    }
  }
  free(host);
  return ok;
}

struct reader {
  CUfileHandle_t fh;
  void *buf;
  size_t offset, size, file_offset;
  ssize_t got;
};

static void *read_thread(void *arg) {
  struct reader *r = arg;
  for (int i = 0; i < 20 && r->got >= 0; ++i) {
    r->got = cuFileRead(r->fh, r->buf, r->size, (off_t)r->file_offset, (off_t)r->offset);
  }
  return NULL;
}

int main(void) {
  int gpus = 0;
  if (!load_driver() || cuInit(0) != 0 || cuDeviceGetCount(&gpus) != 0 || gpus < 1) {
    fprintf(stderr, "SKIP: no CUDA driver or no GPU\n");
    return 77;
  }
  const char *tmp = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof(path), "%s/phx-cufile-client-XXXXXX", tmp != NULL ? tmp : "/tmp");
  int wfd = mkstemp(path);
  if (wfd < 0) {
    perror("mkstemp");
    return 1;
  }
  unsigned char *content = malloc(kFileSize);
  for (size_t i = 0; i < kFileSize; ++i) {
    content[i] = file_byte(i);
  }
  if (write(wfd, content, kFileSize) != kFileSize) {
    perror("write");
    return 1;
  }
  close(wfd);
  int fd = open(path, O_RDWR | O_DIRECT);
  if (fd < 0) { /* tmpfs: no O_DIRECT; the shim then does buffered I/O */
    fd = open(path, O_RDWR);
  }
  /* Plain descriptor for checking and restoring the file's bytes. */
  const int pfd = open(path, O_RDWR);

  /* Driver. */
  int version = 0;
  CHECK_STATUS(cuFileGetVersion(&version), CU_FILE_SUCCESS);
  CHECK(version >= 1070, "version %d lacks the stream API level", version);
  CHECK_STATUS(cuFileGetVersion(NULL), CU_FILE_INVALID_VALUE);
  CHECK_STATUS(cuFileDriverOpen(), CU_FILE_SUCCESS);
  CHECK(cuFileUseCount() == 1, "use count %ld", cuFileUseCount());
  CHECK_STATUS(cuFileDriverSetMaxDirectIOSize(4096), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileDriverSetPollMode(true, 8), CU_FILE_SUCCESS);
  CUfileDrvProps_t props;
  CHECK_STATUS(cuFileDriverGetProperties(&props), CU_FILE_SUCCESS);
  CHECK(props.nvfs.max_direct_io_size == 4096 && props.nvfs.poll_thresh_size == 8 &&
            (props.nvfs.dcontrolflags & (1U << CU_FILE_USE_POLL_MODE)) != 0 &&
            (props.fflags & (1U << CU_FILE_BATCH_IO_SUPPORTED)) != 0 &&
            props.max_batch_io_size >= kBatch,
        "properties do not say what was set");

  /* Handles, with bad input. */
  CUfileDescr_t descr;
  memset(&descr, 0, sizeof(descr));
  CUfileHandle_t fh = NULL;
  CHECK_STATUS(cuFileHandleRegister(NULL, &descr), CU_FILE_INVALID_VALUE);
  descr.type = CU_FILE_HANDLE_TYPE_USERSPACE_FS;
  CHECK_STATUS(cuFileHandleRegister(&fh, &descr), CU_FILE_IO_NOT_SUPPORTED);
  descr.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  descr.handle.fd = -1;
  CHECK_STATUS(cuFileHandleRegister(&fh, &descr), CU_FILE_INVALID_VALUE);
  descr.handle.fd = fd;
  CHECK_STATUS(cuFileHandleRegister(&fh, &descr), CU_FILE_SUCCESS);

  /* Buffers: with two GPUs, A on ordinal 1 and B on ordinal 0 (on the fake
   * driver: Phoenix devices 0 and 1). */
  void *a = dev_alloc(gpus > 1 ? 1 : 0, kBuf);
  void *b = dev_alloc(0, kBuf);
  CHECK(a != NULL && b != NULL, "cuMemAlloc failed");
  if (a == NULL || b == NULL) {
    return 1;
  }
  CHECK_STATUS(cuFileBufRegister(a, kBuf, 0), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileBufRegister(a, kBuf, 0), CU_FILE_MEMORY_ALREADY_REGISTERED);
  CHECK_STATUS(cuFileBufRegister(NULL, kBuf, 0), CU_FILE_INVALID_VALUE);
  CHECK_STATUS(cuFileBufRegister(b, 2 * kBuf, 0), CU_FILE_CUDA_POINTER_RANGE_ERROR);
  CHECK_STATUS(cuFileBufDeregister(b), CU_FILE_MEMORY_NOT_REGISTERED);

  /* Registered buffer with a devPtr offset. */
  ssize_t n = cuFileRead(fh, a, 65536, 4096, 8192);
  CHECK(n == 65536, "read returned %zd", n);
  CHECK(device_matches_file(a, 8192, 65536, 4096), "registered read");
  /* Unaligned everything. */
  n = cuFileRead(fh, a, 100001, 777, 3);
  CHECK(n == 100001, "unaligned read returned %zd", n);
  CHECK(device_matches_file(a, 3, 100001, 777), "unaligned read");

  /* Unregistered buffer on the other GPU. */
  n = cuFileRead(fh, b, 200000, 12345, 4099);
  CHECK(n == 200000, "unregistered read returned %zd", n);
  CHECK(device_matches_file(b, 4099, 200000, 12345), "unregistered read");

  /* Short read at end of file. */
  n = cuFileRead(fh, a, 65536, kFileSize - 100, 0);
  CHECK(n == 100, "read at EOF returned %zd", n);
  CHECK(device_matches_file(a, 0, 100, kFileSize - 100), "read at EOF");
  n = cuFileRead(fh, a, 4096, kFileSize + 4096, 0);
  CHECK(n == 0, "read past EOF returned %zd", n);

  /* Writes from device memory, checked with pread. */
  unsigned char *pattern = malloc(kBuf);
  for (size_t i = 0; i < kBuf; ++i) {
    pattern[i] = (unsigned char)(i * 13 + 5);
  }
  CHECK(cuMemcpyHtoD_v2(dptr(a, 0), pattern, kBuf) == 0, "HtoD");
  n = cuFileWrite(fh, a, 300007, 50001, 11);
  CHECK(n == 300007, "write returned %zd", n);
  unsigned char *back = malloc(kBuf);
  CHECK(pread(pfd, back, 300007, 50001) == 300007 && memcmp(back, pattern + 11, 300007) == 0,
        "written bytes differ");
  /* Restore the file's pattern for the reads below. */
  CHECK(pwrite(pfd, content, kFileSize, 0) == kFileSize, "restore");

  /* Bad input on the I/O calls: -CUfileOpError, or -1 with errno. */
  CHECK(cuFileRead(NULL, a, 4096, 0, 0) == -CU_FILE_INVALID_VALUE, "null handle");
  CHECK(cuFileRead((CUfileHandle_t)&descr, a, 4096, 0, 0) == -CU_FILE_HANDLE_NOT_REGISTERED,
        "unknown handle");
  CHECK(cuFileRead(fh, NULL, 4096, 0, 0) == -CU_FILE_INVALID_VALUE, "null buffer");
  CHECK(cuFileRead(fh, a, 4096, -1, 0) == -CU_FILE_INVALID_VALUE, "negative offset");
  CHECK(cuFileRead(fh, b, 4096, 0, kBuf - 100) == -CU_FILE_CUDA_POINTER_RANGE_ERROR,
        "past the allocation");
  unsigned char *host = malloc(4096);
  n = cuFileRead(fh, host, 4096, 0, 0);
  CHECK(n == -CU_FILE_CUDA_POINTER_INVALID, "host memory: %zd", n);
  free(host);

  /* Threads sharing one unregistered allocation (disjoint ranges: writing
   * the same device bytes from two threads would race by definition). */
  struct reader readers[4];
  pthread_t threads[4];
  for (int i = 0; i < 4; ++i) {
    readers[i] = (struct reader){fh, b, (size_t)i * 250000, 200000, (size_t)i * 1000 + 1, 0};
    pthread_create(&threads[i], NULL, read_thread, &readers[i]);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(threads[i], NULL);
    CHECK(readers[i].got == 200000, "thread %d read %zd", i, readers[i].got);
    CHECK(device_matches_file(b, (size_t)i * 250000, 200000, (size_t)i * 1000 + 1), "thread %d", i);
  }

  /* Stream-ordered read and write. */
  struct CUstream_st *stream = NULL;
  CHECK(cuStreamCreate(&stream, 0) == 0, "cuStreamCreate");
  CHECK_STATUS(cuFileStreamRegister(stream, 0xf), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileStreamRegister(stream, 0x10), CU_FILE_INVALID_VALUE);
  size_t size = 123457;
  off_t file_offset = 4097, buf_offset = 513;
  ssize_t done = -1;
  CHECK_STATUS(cuFileReadAsync(fh, b, &size, &file_offset, &buf_offset, &done, stream),
               CU_FILE_SUCCESS);
  CHECK(cuStreamSynchronize(stream) == 0, "sync");
  CHECK(done == 123457, "async read: %zd", done);
  CHECK(device_matches_file(b, 513, 123457, 4097), "async read");
  CHECK_STATUS(cuFileReadAsync(fh, b, NULL, &file_offset, &buf_offset, &done, stream),
               CU_FILE_INVALID_VALUE);
  size = 65536;
  file_offset = kFileSize + 1000;
  buf_offset = 0;
  done = -1;
  CHECK(cuMemcpyHtoD_v2(dptr(a, 0), pattern, 65536) == 0, "HtoD");
  CHECK_STATUS(cuFileWriteAsync(fh, a, &size, &file_offset, &buf_offset, &done, stream),
               CU_FILE_SUCCESS);
  CHECK(cuStreamSynchronize(stream) == 0, "sync");
  CHECK(done == 65536, "async write: %zd", done);
  CHECK(pread(pfd, back, 65536, kFileSize + 1000) == 65536 && memcmp(back, pattern, 65536) == 0,
        "async write's bytes");
  CHECK(ftruncate(pfd, kFileSize) == 0, "truncate");
  CHECK_STATUS(cuFileStreamDeregister(stream), CU_FILE_SUCCESS);
  cuStreamDestroy_v2(stream);

  /* A batch of 256 reads, 4 KiB each, into the registered buffer. */
  CUfileBatchHandle_t batch = NULL;
  CHECK_STATUS(cuFileBatchIOSetUp(&batch, 0), CU_FILE_INVALID_VALUE);
  CHECK_STATUS(cuFileBatchIOSetUp(&batch, kBatch), CU_FILE_SUCCESS);
  static CUfileIOParams_t params[kBatch];
  static CUfileIOEvents_t events[kBatch];
  for (int i = 0; i < kBatch; ++i) {
    memset(&params[i], 0, sizeof(params[i]));
    params[i].mode = CUFILE_BATCH;
    params[i].fh = fh;
    params[i].opcode = CUFILE_READ;
    params[i].cookie = &params[i];
    params[i].u.batch.devPtr_base = a;
    params[i].u.batch.devPtr_offset = (off_t)i * 4096;
    params[i].u.batch.file_offset = (off_t)((kBatch - 1 - i) * 4096 + 17);
    params[i].u.batch.size = 4096;
  }
  CHECK_STATUS(cuFileBatchIOSubmit(batch, kBatch + 1, params, 0), CU_FILE_INVALID_VALUE);
  params[7].opcode = (CUfileOpcode_t)9;
  CHECK_STATUS(cuFileBatchIOSubmit(batch, kBatch, params, 0), CU_FILE_INVALID_VALUE);
  params[7].opcode = CUFILE_READ;
  CHECK_STATUS(cuFileBatchIOSubmit(batch, kBatch, params, 0), CU_FILE_SUCCESS);
  unsigned got = 0, nr = 1;
  CHECK_STATUS(cuFileBatchIOGetStatus(batch, 2, &nr, events, NULL), CU_FILE_INVALID_VALUE);
  while (got < kBatch && failures == 0) {
    nr = kBatch - got;
    struct timespec timeout = {5, 0};
    CHECK_STATUS(cuFileBatchIOGetStatus(batch, 1, &nr, events + got, &timeout), CU_FILE_SUCCESS);
    CHECK(nr > 0, "no completion within 5 s");
    got += nr;
  }
  int seen[kBatch] = {0};
  for (unsigned i = 0; i < got; ++i) {
    const CUfileIOParams_t *p = events[i].cookie;
    const int index = (int)(p - params);
    CHECK(index >= 0 && index < kBatch && !seen[index], "cookie %p", events[i].cookie);
    if (index >= 0 && index < kBatch) {
      seen[index] = 1;
    }
    CHECK(events[i].status == CUFILE_COMPLETE && events[i].ret == 4096, "entry %d: %d, %zu", index,
          (int)events[i].status, events[i].ret);
  }
  for (int i = 0; i < kBatch; ++i) {
    CHECK(device_matches_file(a, (size_t)i * 4096, 4096, (size_t)(kBatch - 1 - i) * 4096 + 17),
          "batch entry %d", i);
  }
  /* The handle is reusable; cancel drops whatever is left. */
  CHECK_STATUS(cuFileBatchIOSubmit(batch, kBatch, params, 0), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileBatchIOSubmit(batch, 1, params, 0), CU_FILE_BATCH_FULL);
  CHECK_STATUS(cuFileBatchIOCancel(batch), CU_FILE_SUCCESS);
  cuFileBatchIODestroy(batch);
  CHECK_STATUS(cuFileBatchIOCancel(batch), CU_FILE_INVALID_VALUE);

  /* Tear down. */
  CHECK_STATUS(cuFileBufDeregister(a), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileBufDeregister(a), CU_FILE_MEMORY_NOT_REGISTERED);
  cuFileHandleDeregister(fh);
  CHECK(cuFileRead(fh, a, 4096, 0, 0) == -CU_FILE_HANDLE_NOT_REGISTERED, "deregistered handle");
  CHECK_STATUS(cuFileDriverClose(), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileDriverClose(), CU_FILE_DRIVER_NOT_INITIALIZED);
  cuMemFree_v2(dptr(a, 0));
  cuMemFree_v2(dptr(b, 0));
  close(fd);
  close(pfd);
  unlink(path);
  free(content);
  free(pattern);
  free(back);
  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("cufile client: all checks passed\n");
  return 0;
}
