// SPDX-License-Identifier: GPL-2.0
/*
 * fault_free.c - the provider's free callback while I/O is in flight, from
 * several threads at once (phx-fault free-callback).
 *
 * fault.sh loads nvemu on ivshmem #3 (GPU memory: BAR bytes [1, 4) MiB, no
 * other group's) and phxfs's NVIDIA provider on it.  Worker threads loop:
 * cudaFree-able allocation (nvemu ALLOC), REGISTER, mmap, then O_DIRECT
 * reads from the raw disk into it, writes from it to a scratch file on ext4
 * and touches, until the allocation is gone.  A freer thread cudaFrees
 * random live allocations under their owners' feet.  With nv_api=legacy
 * every free fires phxfs's free callback, which revokes the registration
 * while the owner's I/O is in flight; with the persistent API the free is
 * deferred until the owner deregisters.  Owners end a round with cudaFree,
 * then DEREGISTER; mode legacy-deregister-race deregisters first, so that
 * DEREGISTER races the freer's callback (finding 7, fixed: the callback
 * frees the page table the teardown's put_pages no longer can).  Mode
 * legacy-deregister-reuse does the same with nvemu handing freed GPU
 * addresses and page table memory out again at once and entering put_pages
 * late (finding 8: a late put_pages must never name a new registration's
 * table; fault.sh sets nvemu's reuse and put_delay_us).
 *
 * Checked: cudaFree always succeeds (the callback waits for the in-flight
 * I/O instead of failing or leaving pages pinned); a read either completes
 * whole with the disk's bytes or fails EFAULT (legacy) after the free; a
 * write either completes whole with the device's bytes or fails EFAULT;
 * a touch that starts after cudaFree returned raises SIGBUS (legacy), never
 * returns a byte; DEREGISTER of a revoked handle succeeds; at the end phxfs
 * has no registration or mapped page left, nvemu no pin and no allocation,
 * and (legacy) one callback per free that hit a registration.
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
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "nvemu_uapi.h"

#define FREE_WORKERS 4
#define FREE_IO_MAX (256 * KiB)

struct free_slot {
  pthread_mutex_t lock; /* owner and freer agree on va under it */
  uint64_t va;          /* 0: nothing to free */
  atomic_int freed;     /* set once cudaFree of va returned */
};

static struct {
  bool legacy, deregister_race, reuse;
  unsigned int device;
  double deadline;
  uint64_t seed;
  int emu;
  const char *raw_path;
  const char *scratch_dir;
  struct free_slot slots[FREE_WORKERS];
  struct fault_failure fail;
  atomic_ulong frees_hit, reads_ok, reads_efault, writes_ok, writes_efault, touches_bus,
      registrations;
} fr;

static int emu_alloc(uint64_t len, uint32_t flags, struct nvemu_alloc *out) {
  memset(out, 0, sizeof(*out));
  out->length = len;
  out->flags = flags;
  return ioctl(fr.emu, NVEMU_IOC_ALLOC, out) ? -errno : 0;
}

static int emu_free(uint64_t va) {
  struct nvemu_free f = {.va = va};

  return ioctl(fr.emu, NVEMU_IOC_FREE, &f) ? -errno : 0;
}

/* Frees the slot's allocation if it still has one: 1 when it did, 0 when
 * there was none, or -errno. */
static int free_slot(struct free_slot *s) {
  uint64_t va;
  int ret;

  pthread_mutex_lock(&s->lock);
  va = s->va;
  s->va = 0;
  ret = va ? emu_free(va) : 0;
  if (va && !ret) {
    atomic_store(&s->freed, 1);
    ret = 1;
  }
  pthread_mutex_unlock(&s->lock);
  return ret;
}

struct worker {
  unsigned int id;
  uint64_t rng;
  int raw, scratch, dev;
  unsigned char *ram;
  uint64_t disk_size;
};

static void *freer(void *arg) {
  uint64_t rng = fr.seed ^ 0xf4ee;

  (void)arg;
  while (!atomic_load(&fr.fail.stop) && fault_now() < fr.deadline) {
    struct free_slot *s = &fr.slots[fault_below(&rng, FREE_WORKERS)];
    int ret;

    usleep((useconds_t)(200 + fault_below(&rng, 3000)));
    ret = free_slot(s);
    if (ret < 0)
      fault_fail(&fr.fail, "cudaFree under I/O: %s", strerror(-ret));
    else if (ret > 0)
      atomic_fetch_add(&fr.frees_hit, 1);
  }
  return NULL;
}

/* One allocation's life: register, map, I/O until it is freed or done. */
static void one_round(struct worker *w) {
  struct free_slot *s = &fr.slots[w->id];
  uint64_t size = (1 + fault_below(&w->rng, 4)) * NVEMU_GPU_PAGE;
  struct nvemu_alloc a;
  struct phxfs_register r;
  unsigned char *map;
  int ret, ops;

  ret = emu_alloc(size, fault_below(&w->rng, 2) ? NVEMU_ALLOC_SCATTER : 0, &a);
  if (ret == -ENOMEM) {
    usleep(1000); /* the others hold the 3 MiB */
    return;
  }
  if (ret) {
    fault_fail(&fr.fail, "worker %u: cudaMalloc %llu: %s", w->id, (unsigned long long)size,
               strerror(-ret));
    return;
  }
  ret = phx_register(w->dev, a.va, size, &r);
  if (ret) {
    fault_fail(&fr.fail, "worker %u: REGISTER %llu: %s", w->id, (unsigned long long)size,
               strerror(-ret));
    emu_free(a.va);
    return;
  }
  atomic_fetch_add(&fr.registrations, 1);
  map = phx_map(w->dev, &r);
  if (!map) {
    fault_fail(&fr.fail, "worker %u: mmap: %s", w->id, strerror(errno));
    phx_deregister(w->dev, r.handle);
    emu_free(a.va);
    return;
  }
  /* From here the freer may free it at any moment. */
  pthread_mutex_lock(&s->lock);
  s->va = a.va;
  atomic_store(&s->freed, 0);
  pthread_mutex_unlock(&s->lock);

  ops = 1 + (int)fault_below(&w->rng, 12);
  for (int i = 0; i < ops && !atomic_load(&fr.fail.stop); i++) {
    uint64_t len = (1 + fault_below(&w->rng, size / (4 * KiB))) * 4 * KiB;
    uint64_t at = fault_below(&w->rng, size / (4 * KiB) - len / (4 * KiB) + 1) * 4 * KiB;
    int freed_before = atomic_load(&s->freed);
    unsigned int kind = (unsigned int)fault_below(&w->rng, 3);

    if (len > FREE_IO_MAX)
      len = FREE_IO_MAX;
    if (kind == 0) {
      uint64_t disk = fault_below(&w->rng, w->disk_size / (4 * KiB) - 64) * 4 * KiB;
      ssize_t n = pread(w->raw, map + at, len, (off_t)disk);
      int err = errno;

      if (n == (ssize_t)len) {
        atomic_fetch_add(&fr.reads_ok, 1);
        /* Compare only while it is certainly still there. */
        if (!atomic_load(&s->freed) && read_exact(w->raw, w->ram, len, disk) == 0) {
          size_t bad;
          int sig = fault_guarded_cmp(map + at, w->ram, len, &bad);

          if (!sig && bad != len && !atomic_load(&s->freed))
            fault_fail(&fr.fail, "worker %u: read %llu bytes at disk %llu: device byte %zu differs",
                       w->id, (unsigned long long)len, (unsigned long long)disk, bad);
        }
      } else if (n < 0 && err == EFAULT && fr.legacy) {
        atomic_fetch_add(&fr.reads_efault, 1);
      } else if (n > 0 && n % (ssize_t)(4 * KiB) == 0 && fr.legacy) {
        /* Revoked between two bios of one read: what came before is whole. */
        atomic_fetch_add(&fr.reads_efault, 1);
      } else {
        fault_fail(&fr.fail, "worker %u: pread %llu into device memory: %zd (%s), freed %d", w->id,
                   (unsigned long long)len, n, n < 0 ? strerror(err) : "short", freed_before);
      }
      if (freed_before && fr.legacy && n > 0)
        fault_fail(&fr.fail, "worker %u: pread into memory freed before it started returned %zd",
                   w->id, n);
    } else if (kind == 1) {
      uint64_t off = (uint64_t)w->id * FREE_IO_MAX;
      ssize_t n = pwrite(w->scratch, map + at, len, (off_t)off);
      int err = errno;

      if (n == (ssize_t)len) {
        atomic_fetch_add(&fr.writes_ok, 1);
      } else if ((n < 0 && err == EFAULT && fr.legacy) ||
                 (n > 0 && n % (ssize_t)(4 * KiB) == 0 && fr.legacy)) {
        atomic_fetch_add(&fr.writes_efault, 1);
      } else {
        fault_fail(&fr.fail, "worker %u: pwrite %llu from device memory: %zd (%s)", w->id,
                   (unsigned long long)len, n, n < 0 ? strerror(err) : "short");
      }
      if (freed_before && fr.legacy && n > 0)
        fault_fail(&fr.fail, "worker %u: pwrite from memory freed before it started wrote %zd",
                   w->id, n);
    } else {
      int sig = fault_guarded_touch(map + at);

      if (sig == SIGBUS)
        atomic_fetch_add(&fr.touches_bus, 1);
      if (sig && (!fr.legacy || sig != SIGBUS))
        fault_fail(&fr.fail, "worker %u: touch raised signal %d (legacy %d)", w->id, sig,
                   fr.legacy);
      if (!sig && freed_before && fr.legacy)
        fault_fail(&fr.fail,
                   "worker %u: a touch after cudaFree returned a byte of freed GPU memory", w->id);
    }
  }
  /*
   * Tidy up.  The owner frees before it deregisters (a revoked handle must
   * still deregister), except in the deregister-race mode: there DEREGISTER
   * runs while the freer's cudaFree may fire the callback (finding 7 in
   * docs/hardening.md: the page table leaked before the fix).
   */
  if (!fr.deregister_race) {
    ret = free_slot(s);
    if (ret < 0)
      fault_fail(&fr.fail, "worker %u: cudaFree: %s", w->id, strerror(-ret));
  }
  ret = phx_deregister(w->dev, r.handle);
  if (ret)
    fault_fail(&fr.fail, "worker %u: DEREGISTER after %s: %s", w->id,
               atomic_load(&s->freed) ? "cudaFree" : "I/O", strerror(-ret));
  if (munmap(map, size))
    fault_fail(&fr.fail, "worker %u: munmap: %s", w->id, strerror(errno));
  ret = free_slot(s);
  if (ret < 0)
    fault_fail(&fr.fail, "worker %u: cudaFree after deregister: %s", w->id, strerror(-ret));
}

static void *worker_main(void *arg) {
  struct worker *w = arg;

  while (!atomic_load(&fr.fail.stop) && fault_now() < fr.deadline)
    one_round(w);
  return NULL;
}

static int free_callback_test(char *detail, size_t len) {
  struct nvemu_stats before, after;
  struct phxfs_info info;
  struct worker workers[FREE_WORKERS];
  pthread_t th[FREE_WORKERS], freer_th;
  char path[256];
  int info_fd;

  fr.emu = open("/dev/nvemu", O_RDWR | O_CLOEXEC);
  info_fd = phx_open_dev(fr.device);
  EXPECT(fr.emu >= 0 && info_fd >= 0, "open /dev/nvemu and phxfs_dev%u", fr.device);
  EXPECT(!ioctl(fr.emu, NVEMU_IOC_STATS, &before), "nvemu stats");
  for (unsigned int i = 0; i < FREE_WORKERS; i++) {
    struct worker *w = &workers[i];

    pthread_mutex_init(&fr.slots[i].lock, NULL);
    w->id = i;
    w->rng = fr.seed * 0x9e3779b97f4a7c15ULL + i + 1;
    w->raw = open(fr.raw_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    snprintf(path, sizeof(path), "%s/fault-free.bin", fr.scratch_dir);
    w->scratch = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
    w->dev = phx_open_dev(fr.device);
    w->ram = ram_alloc(FREE_IO_MAX);
    EXPECT(w->raw >= 0 && w->scratch >= 0 && w->dev >= 0 && w->ram, "worker setup: %s",
           strerror(errno));
    EXPECT(!ioctl(w->raw, BLKGETSIZE64, &w->disk_size), "disk size");
  }
  for (unsigned int i = 0; i < FREE_WORKERS; i++)
    pthread_create(&th[i], NULL, worker_main, &workers[i]);
  pthread_create(&freer_th, NULL, freer, NULL);
  for (unsigned int i = 0; i < FREE_WORKERS; i++)
    pthread_join(th[i], NULL);
  atomic_store(&fr.fail.stop, 1);
  pthread_join(freer_th, NULL);
  for (unsigned int i = 0; i < FREE_WORKERS; i++) {
    free_slot(&fr.slots[i]);
    close(workers[i].dev);
    close(workers[i].raw);
    close(workers[i].scratch);
  }
  if (atomic_load(&fr.fail.failed))
    FAILF("seed %llu: %s", (unsigned long long)fr.seed, fr.fail.text);
  EXPECT(!fault_wait_idle(info_fd, &info),
         "seed %llu: phxfs still has %llu registrations, %llu pages mapped",
         (unsigned long long)fr.seed, (unsigned long long)info.regs_live,
         (unsigned long long)info.pages_mapped);
  EXPECT(!ioctl(fr.emu, NVEMU_IOC_STATS, &after), "nvemu stats");
  EXPECT(after.pins_live == before.pins_live && after.allocs_live == before.allocs_live,
         "seed %llu: nvemu left %llu pins, %llu allocations (before: %llu, %llu)",
         (unsigned long long)fr.seed, (unsigned long long)after.pins_live,
         (unsigned long long)after.allocs_live, (unsigned long long)before.pins_live,
         (unsigned long long)before.allocs_live);
  if (fr.legacy)
    EXPECT(after.callbacks > before.callbacks, "seed %llu: no free ever hit a registration",
           (unsigned long long)fr.seed);
  else
    EXPECT(after.callbacks == before.callbacks && after.deferred_frees > before.deferred_frees,
           "seed %llu: persistent pins: callbacks %llu->%llu, deferred frees %llu->%llu",
           (unsigned long long)fr.seed, (unsigned long long)before.callbacks,
           (unsigned long long)after.callbacks, (unsigned long long)before.deferred_frees,
           (unsigned long long)after.deferred_frees);
  /* The window finding 8 is about: a put_pages that came after its callback. */
  if (fr.reuse)
    EXPECT(after.raced_puts > before.raced_puts,
           "seed %llu: no DEREGISTER's put_pages came after its callback (nvemu reuse mode)",
           (unsigned long long)fr.seed);
  close(info_fd);
  close(fr.emu);
  snprintf(detail, len,
           "seed %llu: %lu registrations, %lu frees by the freer, %llu callbacks, %llu deferred, "
           "%llu late put_pages; reads %lu whole / %lu revoked, writes %lu / %lu, %lu SIGBUS "
           "touches; nothing left",
           (unsigned long long)fr.seed, atomic_load(&fr.registrations), atomic_load(&fr.frees_hit),
           (unsigned long long)(after.callbacks - before.callbacks),
           (unsigned long long)(after.deferred_frees - before.deferred_frees),
           (unsigned long long)(after.raced_puts - before.raced_puts), atomic_load(&fr.reads_ok),
           atomic_load(&fr.reads_efault), atomic_load(&fr.writes_ok),
           atomic_load(&fr.writes_efault), atomic_load(&fr.touches_bus));
  return 0;
}

int fault_free_callback(const char *mode, unsigned int device, double seconds, uint64_t seed) {
  char name[64];

  fr.reuse = !strcmp(mode, "legacy-deregister-reuse");
  fr.deregister_race = fr.reuse || !strcmp(mode, "legacy-deregister-race");
  fr.legacy = fr.deregister_race || !strcmp(mode, "legacy");
  fr.device = device;
  fr.seed = seed;
  fr.deadline = fault_now() + seconds;
  fr.raw_path = getenv("PHX_RAW_DEV");
  fr.scratch_dir = getenv("PHX_EXT4_DIR");
  if (!fr.raw_path || !fr.scratch_dir) {
    vm_result("fault/free_callback_setup", -1, "PHX_RAW_DEV and PHX_EXT4_DIR needed");
    return 1;
  }
  snprintf(name, sizeof(name), "fault/free_during_io_%s", mode);
  vm_run(name, free_callback_test);
  return vm_failures() ? 1 : 0;
}
