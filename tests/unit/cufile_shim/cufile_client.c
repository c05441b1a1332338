/* SPDX-License-Identifier: MIT */
/*
 * The client's checks (cufile_client.h).  Every transfer into device memory
 * lands in a range of its own that nothing writes afterwards, and the
 * device bytes are compared with the file's at the end, once the shim
 * holds no registration: so a platform whose device memory can only be
 * read while nobody else has it registered (phxfs's BAR) checks the same
 * bytes as one that can read it any time.
 */
#define _GNU_SOURCE
#include "cufile_client.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cufile_shim/cufile_abi.h"

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

enum {
  kFileSize = (1 << 20) + 123,
  kBatch = 256,
  /* Buffer A (registered): the batch's 256 x 4 KiB, then one range per
   * transfer; the end-of-file read gets 64 KiB, as the bytes past the
   * count are unspecified with O_DIRECT; the write source is filled before
   * registration. */
  kRegRead = (1 << 20) + 8192,
  kUnaligned = (1 << 20) + 81920 + 3,
  kEof = (1 << 20) + (192 << 10),
  kSource = (1 << 20) + (256 << 10),
  kSourceSize = 512 << 10,
  /* Buffer B (unregistered). */
  kUnreg = 4099,
  kThreads = 256 << 10,
  kThreadStride = 250000,
  kAsync = (1280 << 10) + 513,
};

static unsigned char file_byte(size_t offset) {
  return (unsigned char)(offset * 7 + offset / 251 + 1);
}

static unsigned char pattern_byte(size_t i) {
  return (unsigned char)(i * 13 + 5);
}

/* Device bytes checked at the end: [device, +size) == file [file_offset, +size). */
struct expectation {
  const unsigned char *device;
  size_t size, file_offset;
  int line;
};
static struct expectation expected[kBatch + 16];
static int nexpected;

#define EXPECT_DEVICE(base, offset, size, file_offset) \
  expect_device((const unsigned char *)(base) + (offset), (size), (file_offset), __LINE__)

static void expect_device(const unsigned char *device, size_t size, size_t file_offset, int line) {
  if (nexpected < (int)(sizeof(expected) / sizeof(expected[0]))) {
    expected[nexpected++] = (struct expectation){device, size, file_offset, line};
  }
}

static void check_device_bytes(const struct cufile_platform *p, const char *path) {
  for (int i = 0; i < nexpected; ++i) {
    const struct expectation *e = &expected[i];
    unsigned char *host = malloc(e->size);
    int ok = host != NULL && p->to_host(host, e->device, e->size) == 0;
    CHECK(ok, "line %d: reading %zu device bytes at %p back", e->line, e->size,
          (const void *)e->device);
    for (size_t j = 0; ok && j < e->size; ++j) {
      if (host[j] != file_byte(e->file_offset + j)) {
        fprintf(stderr, "line %d: byte %zu: device %u, file %u\n", e->line, j, host[j],
                file_byte(e->file_offset + j));
        ok = 0;
        ++failures;
      }
    }
    if (ok && p->evidence != NULL) {
      p->evidence(e->device, e->size, path, e->file_offset);
    }
    free(host);
  }
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

/* Stream-ordered read into B and write from A's source. */
static void stream_io(const struct cufile_platform *p, CUfileHandle_t fh, void *a, void *b, int pfd,
                      unsigned char *back) {
  void *stream = p->stream_create != NULL ? p->stream_create() : NULL;
  CHECK(p->stream_create == NULL || stream != NULL, "stream creation");
  CHECK_STATUS(cuFileStreamRegister(stream, 0xf), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileStreamRegister(stream, 0x10), CU_FILE_INVALID_VALUE);
  size_t size = 123457;
  off_t file_offset = 4097, buf_offset = kAsync;
  ssize_t done = -1;
  CUfileError_t s = cuFileReadAsync(fh, b, &size, &file_offset, &buf_offset, &done, stream);
  if (p->stream_create == NULL && s.err == CU_FILE_ASYNC_NOT_SUPPORTED) {
    printf("SKIP stream-ordered I/O: %s\n", phx_cufile_last_error());
    CHECK_STATUS(cuFileStreamDeregister(stream), CU_FILE_SUCCESS);
    return;
  }
  CHECK(s.err == CU_FILE_SUCCESS, "cuFileReadAsync returned %d", (int)s.err);
  if (p->stream_create != NULL) {
    CHECK(p->stream_sync(stream) == 0, "sync");
  } else { /* the null stream with nothing to sync: wait for the count */
    for (int i = 0; i < 1000 && __atomic_load_n(&done, __ATOMIC_ACQUIRE) == -1; ++i) {
      usleep(10000);
    }
  }
  CHECK(done == 123457, "async read: %zd", done);
  EXPECT_DEVICE(b, kAsync, 123457, 4097);
  CHECK_STATUS(cuFileReadAsync(fh, b, NULL, &file_offset, &buf_offset, &done, stream),
               CU_FILE_INVALID_VALUE);
  size = 65536;
  file_offset = kFileSize + 1000;
  buf_offset = kSource;
  done = -1;
  CHECK_STATUS(cuFileWriteAsync(fh, a, &size, &file_offset, &buf_offset, &done, stream),
               CU_FILE_SUCCESS);
  if (p->stream_create != NULL) {
    CHECK(p->stream_sync(stream) == 0, "sync");
  } else {
    for (int i = 0; i < 1000 && __atomic_load_n(&done, __ATOMIC_ACQUIRE) == -1; ++i) {
      usleep(10000);
    }
  }
  CHECK(done == 65536, "async write: %zd", done);
  int same = pread(pfd, back, 65536, kFileSize + 1000) == 65536;
  for (size_t i = 0; same && i < 65536; ++i) {
    same = back[i] == pattern_byte(i);
  }
  CHECK(same, "async write's bytes");
  CHECK(ftruncate(pfd, kFileSize) == 0, "truncate");
  CHECK_STATUS(cuFileStreamDeregister(stream), CU_FILE_SUCCESS);
  if (stream != NULL) {
    p->stream_destroy(stream);
  }
}

/* A batch of 256 reads, 4 KiB each, into the registered buffer. */
static void batch_io(CUfileHandle_t fh, void *a) {
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
  int before = failures;
  while (got < kBatch && failures == before) {
    nr = kBatch - got;
    struct timespec timeout = {30, 0};
    CHECK_STATUS(cuFileBatchIOGetStatus(batch, 1, &nr, events + got, &timeout), CU_FILE_SUCCESS);
    CHECK(nr > 0, "no completion within 30 s");
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
    EXPECT_DEVICE(a, (size_t)i * 4096, 4096, (size_t)(kBatch - 1 - i) * 4096 + 17);
  }
  /* The handle is reusable; cancel drops whatever is left (entries that
   * ran rewrite the same bytes). */
  CHECK_STATUS(cuFileBatchIOSubmit(batch, kBatch, params, 0), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileBatchIOSubmit(batch, 1, params, 0), CU_FILE_BATCH_FULL);
  CHECK_STATUS(cuFileBatchIOCancel(batch), CU_FILE_SUCCESS);
  cuFileBatchIODestroy(batch);
  CHECK_STATUS(cuFileBatchIOCancel(batch), CU_FILE_INVALID_VALUE);
}

int cufile_client_run(const struct cufile_platform *p) {
  const char *dir = p->dir != NULL ? p->dir : getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof(path), "%s/phx-cufile-client-XXXXXX", dir != NULL ? dir : "/tmp");
  int wfd = mkstemp(path);
  if (wfd < 0) {
    perror("mkstemp");
    return 1;
  }
  unsigned char *content = malloc(kFileSize);
  unsigned char *pattern = malloc(kSourceSize);
  unsigned char *back = malloc(kSourceSize);
  if (content == NULL || pattern == NULL || back == NULL) {
    return 1;
  }
  for (size_t i = 0; i < kFileSize; ++i) {
    content[i] = file_byte(i);
  }
  for (size_t i = 0; i < kSourceSize; ++i) {
    pattern[i] = pattern_byte(i);
  }
  if (write(wfd, content, kFileSize) != kFileSize || fsync(wfd) != 0) {
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

  /* Device memory; A's write source is filled before anything registers it. */
  void *a = p->alloc(0, kCufileClientBuffer);
  void *b = p->alloc(1, kCufileClientBuffer);
  CHECK(a != NULL && b != NULL, "device memory on %s", p->name);
  if (a == NULL || b == NULL) {
    return 1;
  }
  CHECK(p->from_host((unsigned char *)a + kSource, pattern, kSourceSize) == 0, "filling A");

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

  /* Buffers. */
  CHECK_STATUS(cuFileBufRegister(a, kCufileClientBuffer, 0), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileBufRegister(a, kCufileClientBuffer, 0), CU_FILE_MEMORY_ALREADY_REGISTERED);
  CHECK_STATUS(cuFileBufRegister(NULL, kCufileClientBuffer, 0), CU_FILE_INVALID_VALUE);
  if (p->edge != NULL) {
    CHECK_STATUS(cuFileBufRegister(p->edge, 4096, 0), CU_FILE_CUDA_POINTER_RANGE_ERROR);
  }
  CHECK_STATUS(cuFileBufDeregister(b), CU_FILE_MEMORY_NOT_REGISTERED);

  /* Registered buffer with a devPtr offset. */
  ssize_t n = cuFileRead(fh, a, 65536, 4096, kRegRead);
  CHECK(n == 65536, "read returned %zd", n);
  EXPECT_DEVICE(a, kRegRead, 65536, 4096);
  /* Unaligned everything. */
  n = cuFileRead(fh, a, 100001, 777, kUnaligned);
  CHECK(n == 100001, "unaligned read returned %zd", n);
  EXPECT_DEVICE(a, kUnaligned, 100001, 777);

  /* Unregistered buffer (on the other GPU where there are two). */
  n = cuFileRead(fh, b, 200000, 12345, kUnreg);
  CHECK(n == 200000, "unregistered read returned %zd", n);
  EXPECT_DEVICE(b, kUnreg, 200000, 12345);

  /* Short read at end of file. */
  n = cuFileRead(fh, a, 65536, kFileSize - 100, kEof);
  CHECK(n == 100, "read at EOF returned %zd", n);
  EXPECT_DEVICE(a, kEof, 100, kFileSize - 100);
  n = cuFileRead(fh, a, 4096, kFileSize + 4096, kEof + 4096);
  CHECK(n == 0, "read past EOF returned %zd", n);

  /* Writes from device memory, checked with pread. */
  n = cuFileWrite(fh, a, 300007, 50001, kSource + 11);
  CHECK(n == 300007, "write returned %zd", n);
  CHECK(pread(pfd, back, 300007, 50001) == 300007 && memcmp(back, pattern + 11, 300007) == 0,
        "written bytes differ");
  /* Restore the file's bytes for the reads below. */
  CHECK(pwrite(pfd, content, kFileSize, 0) == kFileSize, "restore");

  /* Bad input on the I/O calls: -CUfileOpError, or -1 with errno. */
  CHECK(cuFileRead(NULL, a, 4096, 0, 0) == -CU_FILE_INVALID_VALUE, "null handle");
  CHECK(cuFileRead((CUfileHandle_t)&descr, a, 4096, 0, 0) == -CU_FILE_HANDLE_NOT_REGISTERED,
        "unknown handle");
  CHECK(cuFileRead(fh, NULL, 4096, 0, 0) == -CU_FILE_INVALID_VALUE, "null buffer");
  CHECK(cuFileRead(fh, a, 4096, -1, 0) == -CU_FILE_INVALID_VALUE, "negative offset");
  if (p->edge != NULL) {
    n = cuFileRead(fh, (void *)(uintptr_t)p->edge, 4096, 0, 0);
    CHECK(n == -CU_FILE_CUDA_POINTER_RANGE_ERROR, "past the end of device memory: %zd", n);
  }
  for (int i = 0; i < 2; ++i) {
    if (p->not_device[i] != NULL) {
      n = cuFileRead(fh, (void *)(uintptr_t)p->not_device[i], 4096, 0, 0);
      CHECK(n == -CU_FILE_CUDA_POINTER_INVALID, "host memory %p: %zd", p->not_device[i], n);
      CHECK_STATUS(cuFileBufRegister(p->not_device[i], 4096, 0), CU_FILE_CUDA_POINTER_INVALID);
    }
  }

  /* Threads sharing one unregistered buffer (disjoint ranges: writing the
   * same device bytes from two threads would race by definition). */
  struct reader readers[4];
  pthread_t threads[4];
  for (int i = 0; i < 4; ++i) {
    readers[i] = (struct reader){
        fh, b, kThreads + (size_t)i * kThreadStride, 200000, (size_t)i * 1000 + 1, 0};
    pthread_create(&threads[i], NULL, read_thread, &readers[i]);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(threads[i], NULL);
    CHECK(readers[i].got == 200000, "thread %d read %zd", i, readers[i].got);
    EXPECT_DEVICE(b, kThreads + (size_t)i * kThreadStride, 200000, (size_t)i * 1000 + 1);
  }

  stream_io(p, fh, a, b, pfd, back);
  batch_io(fh, a);

  /* Tear down; then the device bytes, with nothing registered. */
  CHECK_STATUS(cuFileBufDeregister(a), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileBufDeregister(a), CU_FILE_MEMORY_NOT_REGISTERED);
  cuFileHandleDeregister(fh);
  CHECK(cuFileRead(fh, a, 4096, 0, 0) == -CU_FILE_HANDLE_NOT_REGISTERED, "deregistered handle");
  CHECK_STATUS(cuFileDriverClose(), CU_FILE_SUCCESS);
  CHECK_STATUS(cuFileDriverClose(), CU_FILE_DRIVER_NOT_INITIALIZED);
  CHECK(fsync(pfd) == 0, "fsync");
  check_device_bytes(p, path);
  p->release(a, kCufileClientBuffer);
  p->release(b, kCufileClientBuffer);
  close(fd);
  close(pfd);
  if (!p->keep_file) {
    unlink(path);
  }
  free(content);
  free(pattern);
  free(back);
  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("cufile client on %s: all checks passed, %d device ranges compared with the file\n",
         p->name, nexpected);
  return 0;
}
