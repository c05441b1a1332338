/* SPDX-License-Identifier: MIT */
/*
 * libphxfile.so as LMCache's phx backend uses it: loaded by name (dlopen
 * "libphxfile.so", as ctypes.CDLL(find_library("phxfile")) does), buffers
 * registered as neighbouring slices of one CUDA allocation, KV chunks
 * written to and read back from a slab file through stream-ordered I/O
 * (O_DIRECT and buffered descriptors, unaligned file and buffer offsets),
 * every byte compared through the CUDA driver's own copies; and what a
 * careless or hostile caller gets: negative errno, never a crash.
 * The CUDA driver is PHX_CUDA_DRIVER (the fake one in CI) or libcuda.so.1.
 * Exits 0 on success, 1 on a failure, 77 to skip (no CUDA driver).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../cuda_client.h"

/* The ABI, resolved from the library as LMCache's ctypes declarations do. */
static int (*phxFileDriverOpen)(void);
static int (*phxFileDriverClose)(void);
static int (*phxFileBufRegister)(const void *addr, size_t length);
static int (*phxFileBufDeregister)(const void *addr);
static int (*phxFileHandleRegister)(void **fh, int fd);
static int (*phxFileHandleDeregister)(void *fh);
static int (*phxFileStreamRegister)(void *stream);
static int (*phxFileStreamDeregister)(void *stream);
static int (*phxFileReadAsync)(void *fh, void *buf, size_t *nbytes, int64_t *file_offset,
                               int64_t *buf_offset, int64_t *bytes_done, void *stream);
static int (*phxFileWriteAsync)(void *fh, void *buf, size_t *nbytes, int64_t *file_offset,
                                int64_t *buf_offset, int64_t *bytes_done, void *stream);
static const char *(*phxFileLastError)(void);

#define LOAD(lib, fn) PHX_CLIENT_LOAD(lib, fn)

static int failures;

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, " (last error: %s)\n", phxFileLastError()); \
      ++failures;                                                 \
    }                                                             \
  } while (0)

static void *load_phxfile(void) {
  void *lib = dlopen("libphxfile.so", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "FAIL: dlopen libphxfile.so: %s\n", dlerror());
    return NULL;
  }
  if (!(LOAD(lib, phxFileDriverOpen) && LOAD(lib, phxFileDriverClose) &&
        LOAD(lib, phxFileBufRegister) && LOAD(lib, phxFileBufDeregister) &&
        LOAD(lib, phxFileHandleRegister) && LOAD(lib, phxFileHandleDeregister) &&
        LOAD(lib, phxFileStreamRegister) && LOAD(lib, phxFileStreamDeregister) &&
        LOAD(lib, phxFileReadAsync) && LOAD(lib, phxFileWriteAsync) &&
        LOAD(lib, phxFileLastError))) {
    fprintf(stderr, "FAIL: libphxfile.so lacks a phxFile symbol\n");
    return NULL;
  }
  return lib;
}

static unsigned char pattern_byte(uint64_t at, unsigned seed) {
  uint64_t x = at * 0x9e3779b97f4a7c15ULL + seed;
  x ^= x >> 29;
  return (unsigned char)(x * 0xbf58476d1ce4e5b9ULL >> 56);
}

static void fill(unsigned char *p, size_t n, uint64_t at, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    p[i] = pattern_byte(at + i, seed);
  }
}

enum { kSlot = 1 << 20, kSlots = 4, kChunk = 256 * 1024 + 4096 * 3 + 17 };

/* The library exports the ABI and nothing else: no cuFile symbol (the
 * process would bind NVIDIA's callers to it) and none of libphoenix's. */
static void exports_only_the_abi(void *lib) {
  static const char *const hidden[] = {"cuFileRead", "cuFileDriverOpen", "cuFileBufRegister",
                                       "phxfs_open", "phxfs_read",       "phx_cufile_last_error"};
  for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); ++i) {
    CHECK(dlsym(lib, hidden[i]) == NULL, "libphxfile.so exports %s", hidden[i]);
  }
}

/* Argument errors: each a negative errno and nothing else. */
static void bad_arguments(unsigned char *slots, void *fh, struct CUstream_st *stream) {
  size_t n = 4096;
  int64_t file_offset = 0;
  int64_t buf_offset = 0;
  int64_t done = 12345;
  void *out = NULL;
  CHECK(phxFileHandleRegister(NULL, 0) == -EINVAL, "null handle pointer");
  CHECK(phxFileHandleRegister(&out, -1) == -EBADF, "fd -1");
  CHECK(phxFileHandleRegister(&out, 1000000) == -EBADF, "an fd never opened");
  const int dir = open("/", O_RDONLY | O_DIRECTORY);
  CHECK(phxFileHandleRegister(&out, dir) == -EINVAL, "a directory");
  close(dir);
  CHECK(phxFileHandleDeregister(NULL) == -EBADF, "null handle");
  CHECK(phxFileHandleDeregister((void *)(uintptr_t)0x1234) == -EBADF, "a made-up handle");
  CHECK(phxFileBufRegister(NULL, 4096) == -EINVAL, "null buffer");
  CHECK(phxFileBufRegister(slots, 0) == -EINVAL, "empty buffer");
  unsigned char *host = malloc(8192);
  CHECK(phxFileBufRegister(host, 8192) == -EFAULT, "host memory");
  CHECK(phxFileBufRegister(slots + kSlot * kSlots - 4096, 8192) == -EFAULT,
        "a range past its allocation");
  CHECK(phxFileBufRegister(slots, kSlot) == -EEXIST, "registered twice");
  CHECK(phxFileBufDeregister(host) == -EINVAL, "never registered");
  CHECK(phxFileBufDeregister(slots + 4096) == -EINVAL, "inside a registration");
  CHECK(phxFileReadAsync((void *)(uintptr_t)0x1234, slots, &n, &file_offset, &buf_offset, &done,
                         stream) == -EBADF,
        "I/O on a made-up handle");
  CHECK(phxFileReadAsync(fh, NULL, &n, &file_offset, &buf_offset, &done, stream) == -EINVAL,
        "null buffer");
  CHECK(phxFileReadAsync(fh, slots, NULL, &file_offset, &buf_offset, &done, stream) == -EINVAL,
        "null size");
  CHECK(phxFileWriteAsync(fh, slots, &n, &file_offset, &buf_offset, NULL, stream) == -EINVAL,
        "null bytes_done");
  file_offset = -4096;
  CHECK(phxFileReadAsync(fh, slots, &n, &file_offset, &buf_offset, &done, stream) == -EINVAL,
        "negative file offset");
  file_offset = 0;
  buf_offset = -1;
  CHECK(phxFileReadAsync(fh, slots, &n, &file_offset, &buf_offset, &done, stream) == -EINVAL,
        "negative buffer offset");
  buf_offset = (int64_t)kSlot * kSlots - 100;
  CHECK(phxFileReadAsync(fh, slots, &n, &file_offset, &buf_offset, &done, stream) == -EFAULT,
        "a read running past the allocation");
  buf_offset = 0;
  CHECK(phxFileWriteAsync(fh, host, &n, &file_offset, &buf_offset, &done, stream) == -EFAULT,
        "a write from host memory");
  CHECK(done == 12345, "a refused submission wrote bytes_done");
  CHECK(strlen(phxFileLastError()) > 0, "no words for the last failure");
  free(host);
}

/* KV chunks through LMCache's path: write each slot's chunk to the slab at
 * its own offset, read them back into other slots, all on one stream. */
static void chunks_round_trip(unsigned char *slots, int fd, const char *path, const char *what,
                              struct CUstream_st *stream) {
  void *fh = NULL;
  CHECK(phxFileHandleRegister(&fh, fd) == 0 && fh != NULL, "%s: handle", what);
  if (fh == NULL) {
    return;
  }
  unsigned char *host = malloc(kSlot);
  unsigned char *back = malloc(kSlot);
  const int around = open(path, O_RDONLY); /* buffered: the check reads around the library */
  /* Slot i holds chunk i at buffer offset 4096 * i + i (unaligned from slot 1). */
  for (int i = 0; i < kSlots; ++i) {
    fill(host, kChunk, (uint64_t)i << 32, 7);
    const size_t at = (size_t)i * kSlot + 4096 * (size_t)i + (size_t)i;
    CHECK(cuMemcpyHtoD_v2(dptr(slots + at), host, kChunk) == 0, "%s: fill slot %d", what, i);
  }
  size_t sizes[kSlots];
  int64_t file_offsets[kSlots];
  int64_t buf_offsets[kSlots];
  int64_t written[kSlots];
  int64_t read_back[kSlots];
  for (int i = 0; i < kSlots; ++i) {
    sizes[i] = kChunk;
    file_offsets[i] = (int64_t)i * 3 * kSlot + (i % 2 == 0 ? 0 : 512 * i + 3);
    buf_offsets[i] = 4096 * (int64_t)i + i;
    written[i] = read_back[i] = -99999;
    CHECK(phxFileWriteAsync(fh, slots + (size_t)i * kSlot, &sizes[i], &file_offsets[i],
                            &buf_offsets[i], &written[i], stream) == 0,
          "%s: write %d", what, i);
  }
  /* The reads go into the next slot round, at offset 0 of its slot (over
   * the writes' sources), right behind the writes on the same stream: the
   * stream's order alone makes them read what the writes put in the file,
   * including the part that grows it. */
  int64_t zero[kSlots];
  for (int i = 0; i < kSlots; ++i) {
    zero[i] = 0;
    CHECK(phxFileReadAsync(fh, slots + (size_t)((i + 1) % kSlots) * kSlot, &sizes[i],
                           &file_offsets[i], &zero[i], &read_back[i], stream) == 0,
          "%s: read %d", what, i);
  }
  CHECK(cuStreamSynchronize(stream) == 0, "%s: stream", what);
  for (int i = 0; i < kSlots; ++i) {
    CHECK(written[i] == kChunk, "%s: chunk %d wrote %lld", what, i, (long long)written[i]);
    CHECK(read_back[i] == kChunk, "%s: chunk %d read %lld", what, i, (long long)read_back[i]);
    fill(host, kChunk, (uint64_t)i << 32, 7);
    /* The file holds the chunk (read around the library). */
    CHECK(pread(around, back, kChunk, file_offsets[i]) == kChunk && memcmp(back, host, kChunk) == 0,
          "%s: chunk %d in the file differs", what, i);
    CHECK(cuMemcpyDtoH_v2(back, dptr(slots + (size_t)((i + 1) % kSlots) * kSlot), kChunk) == 0 &&
              memcmp(back, host, kChunk) == 0,
          "%s: chunk %d read back differs", what, i);
  }
  /* At the end of the file: a short count, not an error. */
  struct stat st;
  CHECK(fstat(fd, &st) == 0, "%s: fstat", what);
  int64_t tail_offset = st.st_size - 1000;
  int64_t tail_buf = 0;
  size_t tail_size = 8192;
  int64_t tail_done = -99999;
  CHECK(phxFileReadAsync(fh, slots, &tail_size, &tail_offset, &tail_buf, &tail_done, stream) == 0,
        "%s: tail read", what);
  CHECK(cuStreamSynchronize(stream) == 0, "%s: stream", what);
  CHECK(tail_done == 1000, "%s: a read across the end gave %lld, not 1000", what,
        (long long)tail_done);
  CHECK(phxFileHandleDeregister(fh) == 0, "%s: deregister the handle", what);
  CHECK(phxFileHandleDeregister(fh) == -EBADF, "%s: deregistered twice", what);
  close(around);
  free(host);
  free(back);
}

int main(void) {
  int gpus = 0;
  if (!load_cuda_driver() || cuInit(0) != 0 || cuDeviceGetCount(&gpus) != 0 || gpus < 1) {
    fprintf(stderr, "SKIP: no CUDA driver or no GPU\n");
    return 77;
  }
  void *lib = load_phxfile();
  if (lib == NULL) {
    return 1;
  }
  exports_only_the_abi(lib);
  struct CUctx_st *ctx = NULL;
  CUdeviceptr base = 0;
  struct CUstream_st *stream = NULL;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != 0 || cuCtxPushCurrent_v2(ctx) != 0 ||
      cuMemAlloc_v2(&base, (size_t)kSlot * kSlots) != 0 || cuStreamCreate(&stream, 0) != 0) {
    fprintf(stderr, "FAIL: CUDA setup\n");
    return 1;
  }
  unsigned char *slots = (unsigned char *)(uintptr_t)base;
  /* LMCache registers its stream, then every slot of its staging buffer. */
  CHECK(phxFileStreamRegister(stream) == 0, "stream register");
  for (int i = 0; i < kSlots; ++i) {
    CHECK(phxFileBufRegister(slots + (size_t)i * kSlot, kSlot) == 0, "slot %d", i);
  }

  char path[] = "/var/tmp/phxfile-slab-XXXXXX";
  const int made = mkstemp(path);
  CHECK(made >= 0, "mkstemp");
  close(made);
  const int buffered = open(path, O_RDWR);
  void *fh = NULL;
  CHECK(phxFileHandleRegister(&fh, buffered) == 0, "handle");
  bad_arguments(slots, fh, stream);
  CHECK(phxFileHandleDeregister(fh) == 0, "handle deregister");
  chunks_round_trip(slots, buffered, path, "buffered descriptor", stream);
  const int direct = open(path, O_RDWR | O_DIRECT);
  if (direct >= 0) {
    CHECK(ftruncate(direct, 0) == 0, "truncate");
    chunks_round_trip(slots, direct, path, "O_DIRECT descriptor", stream);
    close(direct);
  } else {
    fprintf(stderr, "note: %s takes no O_DIRECT; buffered only\n", path);
  }
  close(buffered);

  for (int i = 0; i < kSlots; ++i) {
    CHECK(phxFileBufDeregister(slots + (size_t)i * kSlot) == 0, "slot %d deregister", i);
  }
  /* DriverClose sweeps: what is registered when it runs is gone after. */
  CHECK(phxFileDriverOpen() == 0, "driver open");
  CHECK(phxFileBufRegister(slots, kSlot) == 0, "register before close");
  CHECK(phxFileDriverClose() == 0, "driver close");
  CHECK(phxFileBufDeregister(slots) == -EINVAL, "a registration outlived DriverClose");
  CHECK(phxFileBufRegister(slots, kSlot) == 0, "register after close (implicit open)");
  CHECK(phxFileDriverClose() == 0, "driver close without an open");
  CHECK(phxFileDriverClose() == 0, "driver close twice");
  CHECK(phxFileStreamDeregister(stream) == 0, "stream deregister");
  unlink(path);
  cuStreamDestroy_v2(stream);
  cuMemFree_v2(base);
  if (failures == 0) {
    printf("phxfile client: every check passed\n");
  }
  return failures == 0 ? 0 : 1;
}
