// SPDX-License-Identifier: MIT
/*
 * phx-demo-guest: the Phoenix example end to end on the emulated machine.
 * A file on the emulated NVMe's ext4 is read into "device memory" (the
 * ivshmem BAR served by phxfs's PCI BAR provider) exactly as an application
 * would on a GPU: phxfs_regmem() once, then plain O_DIRECT pread() on the
 * address it returned, and phxfs_read() through the library for the second
 * half.  No host buffer is in the path: the NVMe controller DMAs into the
 * BAR.  The bytes are checked in the guest against a RAM read of the file
 * and, after the VM exits, by the host against its shm file (evidence).
 *
 * Environment: PHX_EXT4_DIR, PHX_REPORT (rig), PHX_DEMO_MIB (default 64).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "phoenix/phoenix.h"

/* Device 0's BAR bytes from 96 MiB on: the demo's own room. */
#define DEMO_BAR_OFFSET (96ULL << 20)

static FILE *report;

static double now(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void result(const char *status, const char *detail) {
  fprintf(report,
          "PHX-RESULT {\"test\":\"demo/direct_read\",\"status\":\"%s\",\"detail\":\"%s\"}\n",
          status, detail);
  fflush(report);
}

static int fail(const char *what) {
  char detail[300];

  snprintf(detail, sizeof(detail), "%s: %s (%s)", what, strerror(errno), phxfs_last_error());
  fprintf(stderr, "phx-demo-guest: %s\n", detail);
  result("fail", detail);
  return 1;
}

int main(void) {
  const char *dir = getenv("PHX_EXT4_DIR");
  const char *rep = getenv("PHX_REPORT");
  const char *mib_env = getenv("PHX_DEMO_MIB");
  size_t size = (size_t)(mib_env ? strtoul(mib_env, NULL, 10) : 64) << 20;
  size_t half = size / 2, done = 0;
  char path[512], detail[400];
  unsigned char *ram, *target = NULL;
  double t0, t_pread, t_lib;
  const char *engine;
  int fd, dirty;
  ssize_t n;
  FILE *f;

  report = rep ? fopen(rep, "a") : NULL;
  if (!report)
    report = stdout;
  if (!dir || size == 0 || size > (64ULL << 20) * 2)
    return fail("PHX_EXT4_DIR unset or PHX_DEMO_MIB outside 1..128");
  snprintf(path, sizeof(path), "%s/phx/demo.bin", dir);
  if (posix_memalign((void **)&ram, 4096, size))
    return fail("memory");

  /* The file: pseudo-random bytes, flushed and evicted so the read is cold. */
  for (size_t i = 0; i < size; i += 8) {
    uint64_t z = (i / 8 + 1) * 0x9e3779b97f4a7c15ULL;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    memcpy(ram + i, &z, 8);
  }
  fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0 || write(fd, ram, size) != (ssize_t)size || fsync(fd) || close(fd))
    return fail("write the demo file");
  f = fopen("/proc/sys/vm/drop_caches", "w");
  if (f) {
    fputs("3\n", f);
    fclose(f);
  }

  if (phxfs_open(0) != 0)
    return fail("phxfs_open(0)");
  engine = phxfs_engine_name(phxfs_device_engine(0));
  if (strcmp(engine, "direct") != 0) {
    errno = ENODEV;
    return fail("the direct engine was not chosen");
  }
  if (phxfs_regmem(0, (void *)DEMO_BAR_OFFSET, size, (void **)&target) != 0)
    return fail("phxfs_regmem");
  fd = open(path, O_RDONLY | O_DIRECT);
  if (fd < 0)
    return fail("open O_DIRECT");

  /* The paper's way: pread straight into the address regmem returned. */
  t0 = now();
  while (done < half) {
    n = pread(fd, target + done, half - done, (off_t)done);
    if (n <= 0)
      return fail("pread into device memory");
    done += (size_t)n;
  }
  t_pread = now() - t0;
  /* The library's way, with the device address. */
  t0 = now();
  n = phxfs_read((phxfs_fileid_t){fd, 0}, (void *)DEMO_BAR_OFFSET, (off_t)half, size - half,
                 (off_t)half);
  t_lib = now() - t0;
  if (n != (ssize_t)(size - half))
    return fail("phxfs_read");
  close(fd);

  /* Check against the bytes written: every byte, in the guest. */
  dirty = memcmp(target, ram, size) != 0;
  fprintf(report,
          "PHX-EVIDENCE "
          "{\"kind\":\"shm_eq_file\",\"shm\":0,\"shm_off\":%llu,\"path\":\"phx/"
          "demo.bin\",\"file_off\":0,\"len\":%zu}\n",
          DEMO_BAR_OFFSET, size);
  if (phxfs_deregmem(0, (void *)DEMO_BAR_OFFSET, size) != 0 || phxfs_close(0) != 0)
    return fail("deregister");
  snprintf(detail, sizeof(detail),
           "engine %s, %zu MiB from ext4 on NVMe into device memory: pread %.0f MiB/s, phxfs_read "
           "%.0f MiB/s "
           "(TCG-emulated timing, not hardware), host buffer bytes 0, %s",
           engine, size >> 20, (double)half / t_pread / (1 << 20),
           (double)(size - half) / t_lib / (1 << 20), dirty ? "MISMATCH" : "every byte verified");
  result(dirty ? "fail" : "pass", detail);
  printf("phx-demo-guest: %s\n", detail);
  return dirty;
}
