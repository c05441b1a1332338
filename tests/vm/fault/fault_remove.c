// SPDX-License-Identifier: GPL-2.0
/*
 * fault_remove.c - the emulated NVMe removed while device memory is mapped
 * and being read into (phx-fault nvme-remove BDF).
 *
 * fault.sh loads phxfs with the PCI BAR provider.  Two threads read 1 MiB
 * chunks of the raw NVMe with O_DIRECT into a registered and mapped 16 MiB
 * range of device 1 (the fault suite's [144, 160) MiB), checking every
 * completed read against a reference read into RAM beforehand, while the
 * main thread removes the NVMe controller from the guest (sysfs remove: the
 * driver tears the controller down under in-flight requests).  fault.sh
 * rescans the bus afterwards and checks that the disk came back.
 *
 * Claims: no read returns wrong bytes; a read issued after the removal
 * returned fails with an I/O errno (EIO, ENODEV, ENXIO) or reads nothing (a
 * disk going away has its capacity set to 0), and a read cut short by it
 * holds the disk's bytes as far as it counts; the registration still
 * deregisters, and nothing is left registered or mapped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"

#define REMOVE_DEV 1
#define REMOVE_BAR_OFF (144 * MiB)
#define REMOVE_LEN (16 * MiB)
#define REMOVE_CHUNK (1 * MiB)
#define REMOVE_CHUNKS 8 /* disk chunks read again and again */
#define REMOVE_THREADS 2
#define REMOVE_DISK_OFF (64 * MiB)

static struct {
  const char *raw_path;
  unsigned char *map;
  unsigned char *ref;
  struct fault_failure fail;
  atomic_int removed; /* the sysfs write has returned */
  atomic_ulong whole, failed_before, failed_after, issued_after, short_reads;
  atomic_int first_errno;
} rm_state;

static bool io_errno(int e) {
  return e == EIO || e == ENODEV || e == ENXIO;
}

static void *reader(void *arg) {
  unsigned int id = (unsigned int)(uintptr_t)arg;
  int raw = open(rm_state.raw_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
  uint64_t i = id;

  if (raw < 0) {
    fault_fail(&rm_state.fail, "reader %u: open %s: %s", id, rm_state.raw_path, strerror(errno));
    return NULL;
  }
  while (!atomic_load(&rm_state.fail.stop)) {
    unsigned int chunk = (unsigned int)(i++ % REMOVE_CHUNKS);
    unsigned char *dst = rm_state.map + (size_t)(id * REMOVE_CHUNKS + chunk) * REMOVE_CHUNK;
    int after = atomic_load(&rm_state.removed);
    ssize_t n = pread(raw, dst, REMOVE_CHUNK, (off_t)(REMOVE_DISK_OFF + chunk * REMOVE_CHUNK));
    int e = errno;
    size_t diff_at = 0;

    if (after)
      atomic_fetch_add(&rm_state.issued_after, 1);
    if (n == (ssize_t)REMOVE_CHUNK) {
      if (after)
        fault_fail(&rm_state.fail, "reader %u: a read issued after the removal succeeded", id);
      if (fault_guarded_cmp(dst, rm_state.ref + (size_t)chunk * REMOVE_CHUNK, REMOVE_CHUNK,
                            &diff_at) ||
          diff_at != REMOVE_CHUNK)
        fault_fail(&rm_state.fail, "reader %u: chunk %u differs from the disk at byte %zu", id,
                   chunk, diff_at);
      atomic_fetch_add(&rm_state.whole, 1);
      continue;
    }
    if (n >= 0) {
      /* A disk going away has its capacity set to 0: the read ends early
       * (at 0 bytes, which is end of file), and what it did read is right. */
      if (n > 0 && (fault_guarded_cmp(dst, rm_state.ref + (size_t)chunk * REMOVE_CHUNK, (size_t)n,
                                      &diff_at) ||
                    diff_at != (size_t)n))
        fault_fail(&rm_state.fail, "reader %u: short read of %zd bytes differs at byte %zu", id, n,
                   diff_at);
      atomic_fetch_add(&rm_state.short_reads, 1);
      atomic_fetch_add(after ? &rm_state.failed_after : &rm_state.failed_before, 1);
      if (after && atomic_load(&rm_state.issued_after) > 64)
        break;
      continue;
    }
    if (!io_errno(e)) {
      fault_fail(&rm_state.fail, "reader %u: read failed with %s, not an I/O error", id,
                 strerror(e));
      continue;
    }
    int none = 0;
    atomic_compare_exchange_strong(&rm_state.first_errno, &none, e);
    atomic_fetch_add(after ? &rm_state.failed_after : &rm_state.failed_before, 1);
    if (after && atomic_load(&rm_state.issued_after) > 64)
      break; /* enough evidence; the device is gone */
  }
  close(raw);
  return NULL;
}

static const char *remove_bdf;

static int remove_test(char *detail, size_t len) {
  struct phxfs_register r;
  struct phxfs_info info;
  pthread_t th[REMOVE_THREADS];
  char path[128];
  int fd = phx_open_dev(REMOVE_DEV);
  int raw = open(rm_state.raw_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
  int sysfs;

  EXPECT(fd >= 0 && raw >= 0, "open phxfs_dev%d and %s: %s", REMOVE_DEV, rm_state.raw_path,
         strerror(errno));
  rm_state.ref = aligned_alloc(4096, REMOVE_CHUNKS * REMOVE_CHUNK);
  EXPECT(rm_state.ref != NULL, "reference buffer");
  EXPECT(pread(raw, rm_state.ref, REMOVE_CHUNKS * REMOVE_CHUNK, REMOVE_DISK_OFF) ==
             (ssize_t)(REMOVE_CHUNKS * REMOVE_CHUNK),
         "reference read: %s", strerror(errno));
  close(raw);
  EXPECT(!phx_register(fd, REMOVE_BAR_OFF, REMOVE_LEN, &r), "REGISTER: %s", strerror(errno));
  rm_state.map = phx_map(fd, &r);
  EXPECT(rm_state.map != NULL, "mmap: %s", strerror(errno));
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/remove", remove_bdf);
  sysfs = open(path, O_WRONLY | O_CLOEXEC);
  EXPECT(sysfs >= 0, "open %s: %s", path, strerror(errno));

  for (unsigned int i = 0; i < REMOVE_THREADS; i++)
    pthread_create(&th[i], NULL, reader, (void *)(uintptr_t)i);
  /* Let reads run whole first, then pull the controller from under them. */
  while (atomic_load(&rm_state.whole) < 16 && !atomic_load(&rm_state.fail.stop))
    usleep(1000);
  if (write(sysfs, "1", 1) != 1)
    fault_fail(&rm_state.fail, "remove %s: %s", remove_bdf, strerror(errno));
  close(sysfs);
  atomic_store(&rm_state.removed, 1);
  {
    double until = fault_now() + 5;

    while (atomic_load(&rm_state.issued_after) < 64 && fault_now() < until &&
           !atomic_load(&rm_state.fail.stop))
      usleep(1000);
  }
  atomic_store(&rm_state.fail.stop, 1);
  for (unsigned int i = 0; i < REMOVE_THREADS; i++)
    pthread_join(th[i], NULL);
  if (atomic_load(&rm_state.fail.failed))
    FAILF("%s", rm_state.fail.text);

  EXPECT(!munmap(rm_state.map, REMOVE_LEN), "munmap: %s", strerror(errno));
  EXPECT(!phx_deregister(fd, r.handle), "DEREGISTER after the removal: %s", strerror(errno));
  EXPECT(!fault_wait_idle(fd, &info), "%llu registrations, %llu pages left",
         (unsigned long long)info.regs_live, (unsigned long long)info.pages_mapped);
  close(fd);
  EXPECT(atomic_load(&rm_state.whole) >= 16, "only %lu whole reads before the removal",
         atomic_load(&rm_state.whole));
  EXPECT(atomic_load(&rm_state.failed_after) > 0, "no read issued after the removal failed");
  snprintf(
      detail, len,
      "%lu reads whole and verified, %lu cut short or failed while the controller went "
      "away, %lu of %lu issued after the removal failed (%lu of all these read short or "
      "nothing, first errno: %s); deregistered, nothing left",
      atomic_load(&rm_state.whole), atomic_load(&rm_state.failed_before),
      atomic_load(&rm_state.failed_after), atomic_load(&rm_state.issued_after),
      atomic_load(&rm_state.short_reads),
      atomic_load(&rm_state.first_errno) ? strerror(atomic_load(&rm_state.first_errno)) : "none");
  free(rm_state.ref);
  return 0;
}

int fault_nvme_remove(const char *bdf) {
  remove_bdf = bdf;
  rm_state.raw_path = getenv("PHX_RAW_DEV");
  if (!rm_state.raw_path) {
    vm_result("fault/nvme_removed_while_mapped", -1, "PHX_RAW_DEV needed");
    return 1;
  }
  vm_run("fault/nvme_removed_while_mapped", remove_test);
  return vm_failures() ? 1 : 0;
}
