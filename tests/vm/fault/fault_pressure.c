// SPDX-License-Identifier: GPL-2.0
/*
 * fault_pressure.c - registration under memory pressure (phx-fault
 * mem-pressure).
 *
 * fault.sh loads phxfs with the PCI BAR provider on all eight ivshmem
 * devices.  A hog process fills anonymous memory (the guest has no swap,
 * so it cannot be reclaimed) until MemAvailable is down to HOG_LEFT, then
 * keeps freeing and refilling 32 MiB of it, so that the kernel reclaims
 * and compacts all the time.  Meanwhile threads register, map, touch, read
 * into and deregister: device 0's whole 256 MiB BAR (a 512 KiB page array, which the
 * kernel can no longer find in one piece and takes from vmalloc), a 16 MiB
 * range of device 1 with O_DIRECT reads checked byte for byte, and bursts of
 * small registrations on devices 4-7 left to the file's release.
 *
 * The hog stays clear of the OOM killer (an OOM report is a kernel splat the
 * rig fails on), so allocations rarely fail for real; the claim is that
 * every call either succeeds or fails with ENOMEM, no kernel warning, and
 * nothing is left registered or mapped afterwards.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault.h"

#define HOG_LEFT (64 * MiB) /* MemAvailable the hog leaves */
#define HOG_CHUNK (4 * MiB)
#define HOG_BREATH 8 /* chunks freed and refilled each cycle */
#define PRESSURE_THREADS 3
#define READ_DEV 1
#define READ_BAR_OFF (144 * MiB) /* device 1 [144, 160) MiB: the fault suite's */
#define READ_LEN (16 * MiB)
#define READ_CHUNK (1 * MiB)

static struct {
  double seconds, deadline;
  uint64_t seed;
  const char *raw_path;
  struct fault_failure fail;
  atomic_ulong regs, enomem, reads, min_avail_kb;
} mp;

static unsigned long mem_available_kb(void) {
  char line[128];
  unsigned long kb = 0;
  FILE *f = fopen("/proc/meminfo", "r");

  if (!f)
    return 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "MemAvailable: %lu kB", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

static void note_available(void) {
  unsigned long kb = mem_available_kb(), seen = atomic_load(&mp.min_avail_kb);

  while (kb < seen && !atomic_compare_exchange_weak(&mp.min_avail_kb, &seen, kb)) {
  }
}

/* The hog: never returns; killed by the parent.  Writes one byte to ready
 * once memory is down to HOG_LEFT. */
static void hog(int ready) {
  static void *chunks[1024];
  size_t n = 0;
  FILE *adj = fopen("/proc/self/oom_score_adj", "w");

  if (adj) {
    fputs("1000\n", adj); /* if it comes to that, the OOM killer takes the hog */
    fclose(adj);
  }
  for (;;) {
    while (n < 1024 && mem_available_kb() * KiB > HOG_LEFT + HOG_CHUNK) {
      void *p = mmap(NULL, HOG_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

      if (p == MAP_FAILED)
        break;
      memset(p, 0x5a, HOG_CHUNK);
      chunks[n++] = p;
    }
    if (ready >= 0) {
      (void)!write(ready, "r", 1);
      close(ready);
      ready = -1;
    }
    usleep(100000);
    for (int i = 0; i < HOG_BREATH && n > 0; i++)
      munmap(chunks[--n], HOG_CHUNK);
  }
}

static bool allowed(int ret, const char *what) {
  if (ret == 0)
    return true;
  if (ret == -ENOMEM) {
    atomic_fetch_add(&mp.enomem, 1);
    return false;
  }
  fault_fail(&mp.fail, "%s: %s (only success or ENOMEM)", what, strerror(-ret));
  return false;
}

/* Device 0's whole BAR: the largest page array (device 1 has the reads). */
static void whole_bar(void) {
  const unsigned int dev = 0;
  struct phxfs_info info;
  struct phxfs_register r;
  unsigned char *map;
  int fd = phx_open_dev(dev);

  if (fd < 0 || phx_get_info(fd, &info)) {
    fault_fail(&mp.fail, "open/GET_INFO phxfs_dev%u: %s", dev, strerror(errno));
    return;
  }
  if (allowed(phx_register(fd, 0, info.bar_size, &r), "REGISTER whole BAR")) {
    atomic_fetch_add(&mp.regs, 1);
    map = phx_map(fd, &r);
    if (map) {
      for (uint64_t off = 0; off < info.bar_size; off += info.bar_size / 64)
        (void)*(volatile unsigned char *)(map + off);
      munmap(map, info.bar_size);
    } else {
      allowed(-errno, "mmap whole BAR");
    }
    allowed(phx_deregister(fd, r.handle), "DEREGISTER whole BAR");
  }
  close(fd);
}

/* O_DIRECT reads into device 1's fault range, checked against RAM. */
static void reads(uint64_t *rng, unsigned char *ram, int raw, uint64_t disk_size) {
  struct phxfs_register r;
  unsigned char *map;
  int fd = phx_open_dev(READ_DEV);

  if (fd < 0) {
    fault_fail(&mp.fail, "open phxfs_dev%d: %s", READ_DEV, strerror(errno));
    return;
  }
  if (allowed(phx_register(fd, READ_BAR_OFF, READ_LEN, &r), "REGISTER 16 MiB")) {
    atomic_fetch_add(&mp.regs, 1);
    map = phx_map(fd, &r);
    if (!map) {
      allowed(-errno, "mmap 16 MiB");
    } else {
      for (int i = 0; i < 4 && !atomic_load(&mp.fail.stop); i++) {
        uint64_t at = fault_below(rng, READ_LEN / READ_CHUNK) * READ_CHUNK;
        uint64_t disk = fault_below(rng, disk_size / READ_CHUNK) * READ_CHUNK;
        ssize_t n = pread(raw, map + at, READ_CHUNK, (off_t)disk);

        if (n != (ssize_t)READ_CHUNK) {
          if (n < 0)
            allowed(-errno, "O_DIRECT pread into device memory");
          else
            fault_fail(&mp.fail, "pread into device memory: %zd of %llu bytes", n,
                       (unsigned long long)READ_CHUNK);
          continue;
        }
        if (read_exact(raw, ram, READ_CHUNK, disk)) {
          allowed(-errno, "reference pread");
          continue;
        }
        if (first_diff(map + at, ram, READ_CHUNK) != READ_CHUNK)
          fault_fail(&mp.fail, "device bytes at BAR %llu differ from disk %llu",
                     (unsigned long long)(READ_BAR_OFF + at), (unsigned long long)disk);
        atomic_fetch_add(&mp.reads, 1);
      }
      munmap(map, READ_LEN);
    }
    allowed(phx_deregister(fd, r.handle), "DEREGISTER 16 MiB");
  }
  close(fd);
}

/* Up to 16 small registrations on one of devices 4-7, above the many
 * group's first MiB, mapped, then left to close(). */
static void burst(uint64_t *rng) {
  unsigned int dev = 4 + (unsigned int)fault_below(rng, 4);
  struct phxfs_register r;
  int fd = phx_open_dev(dev);
  unsigned int count = 1 + (unsigned int)fault_below(rng, 16);

  if (fd < 0) {
    fault_fail(&mp.fail, "open phxfs_dev%u: %s", dev, strerror(errno));
    return;
  }
  void *maps[16] = {0};
  uint64_t lens[16] = {0};

  for (unsigned int i = 0; i < count; i++) {
    /* 16 disjoint 192 KiB slots in [1, 4) MiB. */
    lens[i] = (1 + fault_below(rng, 48)) * 4 * KiB;
    if (allowed(phx_register(fd, 1 * MiB + i * 192 * KiB, lens[i], &r), "REGISTER small")) {
      atomic_fetch_add(&mp.regs, 1);
      maps[i] = phx_map(fd, &r);
      if (!maps[i])
        allowed(-errno, "mmap small");
      else
        (void)*(volatile unsigned char *)maps[i];
    }
  }
  for (unsigned int i = 0; i < count; i++)
    if (maps[i])
      munmap(maps[i], lens[i]);
  close(fd); /* no DEREGISTER: the release tears the registrations down */
}

struct pressure_thread {
  unsigned int id;
  unsigned char *ram;
  int raw;
  uint64_t disk_size;
};

static void *pressure_main(void *arg) {
  struct pressure_thread *t = arg;
  uint64_t rng = mp.seed * 0x2545f4914f6cdd1dULL + t->id;

  while (!atomic_load(&mp.fail.stop) && fault_now() < mp.deadline) {
    if (t->id == 0)
      whole_bar();
    else if (t->id == 1)
      reads(&rng, t->ram, t->raw, t->disk_size);
    else
      burst(&rng);
    note_available();
  }
  return NULL;
}

static int pressure_test(char *detail, size_t len) {
  struct pressure_thread threads[PRESSURE_THREADS];
  pthread_t th[PRESSURE_THREADS];
  struct phxfs_info info;
  unsigned long before_kb = mem_available_kb();
  int ready[2], status;
  char c;
  pid_t pid;

  for (unsigned int i = 0; i < PRESSURE_THREADS; i++) {
    threads[i] = (struct pressure_thread){.id = i, .ram = ram_alloc(READ_CHUNK)};
    threads[i].raw = open(mp.raw_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    EXPECT(threads[i].ram && threads[i].raw >= 0 &&
               !ioctl(threads[i].raw, BLKGETSIZE64, &threads[i].disk_size),
           "setup: %s", strerror(errno));
  }
  EXPECT(!pipe(ready), "pipe");
  pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    close(ready[0]);
    hog(ready[1]);
  }
  close(ready[1]);
  EXPECT(read(ready[0], &c, 1) == 1, "the hog died before filling memory");
  close(ready[0]);
  atomic_store(&mp.min_avail_kb, mem_available_kb());
  mp.deadline = fault_now() + mp.seconds;
  for (unsigned int i = 0; i < PRESSURE_THREADS; i++)
    pthread_create(&th[i], NULL, pressure_main, &threads[i]);
  for (unsigned int i = 0; i < PRESSURE_THREADS; i++)
    pthread_join(th[i], NULL);
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  if (atomic_load(&mp.fail.failed))
    FAILF("seed %llu: %s", (unsigned long long)mp.seed, mp.fail.text);
  EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
         "the hog ended by itself (status %#x): did the OOM killer run?", status);
  for (unsigned int dev = 0; dev < 8; dev++) {
    int fd = phx_open_dev(dev);

    EXPECT(fd >= 0, "open phxfs_dev%u", dev);
    EXPECT(!fault_wait_idle(fd, &info), "phxfs_dev%u: %llu registrations, %llu pages left", dev,
           (unsigned long long)info.regs_live, (unsigned long long)info.pages_mapped);
    close(fd);
  }
  EXPECT(atomic_load(&mp.regs) > 0, "no registration ran");
  snprintf(detail, len,
           "seed %llu: MemAvailable %lu MiB before, at least %lu MiB under the hog; %lu "
           "registrations, %lu ENOMEM, %lu 1 MiB reads verified; nothing left",
           (unsigned long long)mp.seed, before_kb >> 10, atomic_load(&mp.min_avail_kb) >> 10,
           atomic_load(&mp.regs), atomic_load(&mp.enomem), atomic_load(&mp.reads));
  return 0;
}

int fault_memory_pressure(double seconds, uint64_t seed) {
  mp.seed = seed;
  mp.seconds = seconds; /* counted from when the hog is in place */
  mp.raw_path = getenv("PHX_RAW_DEV");
  if (!mp.raw_path) {
    vm_result("fault/memory_pressure", -1, "PHX_RAW_DEV needed");
    return 1;
  }
  vm_run("fault/memory_pressure", pressure_test);
  return vm_failures() ? 1 : 0;
}
