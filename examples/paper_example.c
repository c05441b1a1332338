/* SPDX-License-Identifier: MIT */
/*
 * paper_example: the Phoenix paper's example against libphoenix's C API.
 * GPU memory is registered once; after that the file is read with a plain
 * pread() on the address phxfs_regmem() returned, so the NVMe controller
 * DMAs straight into GPU memory with no host buffer and no per-I/O library
 * call.  Needs a GPU; without the phxfs module the compat engine serves the
 * device and the read goes through phxfs_read() (staged copies) instead.
 *
 *   paper_example FILE [BYTES]      (BYTES default 1 MiB, a multiple of 64 KiB)
 */
#define _GNU_SOURCE /* O_DIRECT */

#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phoenix/phoenix.h"

enum { kDevice = 0, kGpuPage = 64 * 1024 };

static int fail_phx(const char *call) {
  const int err = errno;
  fprintf(stderr, "paper_example: %s failed: %s (%s)\n", call, phxfs_last_error(),
          phxfs_strerror(err));
  return 1;
}

static int fail_cuda(const char *call, cudaError_t err) {
  fprintf(stderr, "paper_example: %s failed: %s\n", call, cudaGetErrorString(err));
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s FILE [BYTES]\n", argv[0]);
    return 2;
  }
  size_t len = (size_t)kGpuPage * 16;
  if (argc == 3) {
    char *end = NULL;
    const unsigned long long value = strtoull(argv[2], &end, 0);
    if (*end != '\0' || value == 0 || value % kGpuPage != 0) {
      fprintf(stderr, "paper_example: BYTES must be a positive multiple of 64 KiB\n");
      return 2;
    }
    len = (size_t)value;
  }

  if (phxfs_open(kDevice) != 0) {
    return fail_phx("phxfs_open");
  }
  /* The host engine (no GPU) cannot take a GPU pointer. */
  const phxfs_engine_t engine = phxfs_device_engine(kDevice);
  if (engine != PHXFS_ENGINE_DIRECT && engine != PHXFS_ENGINE_COMPAT) {
    fprintf(stderr,
            "paper_example: device %d uses the %s engine; this example needs a GPU (direct "
            "engine with the phxfs module, or compat)\n",
            kDevice, phxfs_engine_name(engine));
    (void)phxfs_close(kDevice);
    return 2;
  }

  int status = 1;
  void *gpu = NULL;
  void *target = NULL;
  int fd = -1;
  ssize_t n = -1;
  unsigned char head[16] = {0};
  size_t shown = 0;
  cudaError_t cerr = cudaMalloc(&gpu, len);
  if (cerr != cudaSuccess) {
    status = fail_cuda("cudaMalloc", cerr);
    goto close_device;
  }
  if (phxfs_regmem(kDevice, gpu, len, &target) != 0) {
    status = fail_phx("phxfs_regmem");
    goto free_gpu;
  }
  fd = open(argv[1], O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "paper_example: open %s: %s\n", argv[1], strerror(errno));
    goto deregister;
  }

  if (engine == PHXFS_ENGINE_DIRECT) {
    /* The whole point: an ordinary pread into GPU memory. */
    n = pread(fd, target, len, 0);
    if (n < 0) {
      fprintf(stderr, "paper_example: pread: %s\n", strerror(errno));
      goto close_file;
    }
  } else {
    const phxfs_fileid_t fid = {fd, kDevice};
    n = phxfs_read(fid, gpu, 0, len, 0);
    if (n < 0) {
      (void)fail_phx("phxfs_read");
      goto close_file;
    }
  }
  shown = (size_t)n < sizeof(head) ? (size_t)n : sizeof(head);
  cerr = cudaMemcpy(head, gpu, shown, cudaMemcpyDeviceToHost);
  if (cerr != cudaSuccess) {
    status = fail_cuda("cudaMemcpy", cerr);
    goto close_file;
  }
  printf("read %zd bytes of %s into GPU memory at %p; first bytes:", n, argv[1], gpu);
  for (size_t i = 0; i < shown; ++i) {
    printf(" %02x", head[i]);
  }
  printf("\n");
  status = 0;

close_file:
  close(fd);
deregister:
  if (phxfs_deregmem(kDevice, gpu, len) != 0) {
    status = fail_phx("phxfs_deregmem");
  }
free_gpu:
  cerr = cudaFree(gpu);
  if (cerr != cudaSuccess) {
    status = fail_cuda("cudaFree", cerr);
  }
close_device:
  if (phxfs_close(kDevice) != 0) {
    status = fail_phx("phxfs_close");
  }
  return status;
}
