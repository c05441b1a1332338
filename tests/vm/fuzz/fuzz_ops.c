// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_ops.c - the operations phx-fuzz chooses from and what the ABI
 * promises for each (kernel/uapi/phxfs_ioctl.h, docs/kernel.md).
 *
 * Locking: slot.map_lock, then proc.lock; the process lock is never held
 * across a syscall that may block.  map_lock keeps a slot's mapping (and
 * its bytes, for the checks) still; DEREGISTER and close never take it, so
 * they race with I/O on the mapping as intended.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "vmtest.h"

#define WAITING(t, what) ((t)->proc->shared->now[(t)->proc->id][(t)->id].waiting = (what))
#define LOCK(t) (WAITING(t, "proc lock"), pthread_mutex_lock(&(t)->proc->lock), WAITING(t, NULL))
#define UNLOCK(t) pthread_mutex_unlock(&(t)->proc->lock)

uint64_t fz_raw_size;

/* ---- table helpers (proc.lock held) ------------------------------------- */

static int pick_file(struct fz_thread *t) {
  struct fz_proc *p = t->proc;
  int start = (int)fz_below(t, FZ_MAX_FILES), i;

  for (i = 0; i < FZ_MAX_FILES; i++) {
    int f = (start + i) % FZ_MAX_FILES;

    if (p->files[f].used)
      return f;
  }
  return -1;
}

/* A slot that is used and, if want_map, mapped (or, if !want_map, registered and unmapped). */
static int pick_slot(struct fz_thread *t, int want_map) {
  struct fz_proc *p = t->proc;
  int start = (int)fz_below(t, FZ_MAX_SLOTS), i;

  for (i = 0; i < FZ_MAX_SLOTS; i++) {
    int s = (start + i) % FZ_MAX_SLOTS;
    struct fz_slot *sl = &p->slots[s];

    if (!sl->used)
      continue;
    if (want_map == 1 && sl->map)
      return s;
    if (want_map == 0 && !sl->map && sl->registered)
      return s;
    if (want_map < 0 && sl->registered)
      return s;
  }
  return -1;
}

static bool file_same(struct fz_thread *t, int f, uint32_t gen) {
  bool same;

  LOCK(t);
  same = t->proc->files[f].used && t->proc->files[f].gen == gen;
  UNLOCK(t);
  return same;
}

static bool slot_live(struct fz_thread *t, struct fz_slot *sl, uint32_t gen) {
  bool live;

  LOCK(t);
  live = sl->used && sl->registered && sl->gen == gen;
  UNLOCK(t);
  return live;
}

/* map_lock held: drop the slot once nothing refers to it. */
static void slot_maybe_free(struct fz_thread *t, struct fz_slot *sl) {
  LOCK(t);
  if (sl->used && !sl->registered && !sl->map)
    sl->used = false;
  UNLOCK(t);
}

static void publish_handle(struct fz_thread *t, unsigned int dev, uint64_t handle, uint64_t len) {
  struct fz_shared *sh = t->proc->shared;
  unsigned int i = (unsigned int)fz_below(t, FZ_SHARED_HANDLES);

  sh->handles[i].handle = 0;
  sh->handles[i].dev = dev;
  sh->handles[i].len = len;
  sh->handles[i].handle = handle;
}

/* Whether a published handle is one of this process's own live registrations. */
static bool own_handle(struct fz_thread *t, unsigned int dev, uint64_t handle) {
  bool own = false;
  int s;

  LOCK(t);
  for (s = 0; s < FZ_MAX_SLOTS; s++)
    if (t->proc->slots[s].used && t->proc->slots[s].handle == handle &&
        t->proc->slots[s].dev == dev)
      own = true;
  UNLOCK(t);
  return own;
}

/*
 * The phxfs mappings of ours at this file offset on this device, per
 * /proc/self/maps, each with the slot that tracks its address (-1: none).
 */
static const char *maps_with_offset(struct fz_thread *t, unsigned int dev, uint64_t off) {
  static __thread char out[512];
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512], name[64];
  size_t n = 0;

  snprintf(name, sizeof(name), "phxfs_dev%u", t->proc->cfg->dev[dev].index);
  out[0] = 0;
  while (f && fgets(line, sizeof(line), f)) {
    unsigned long lo, hi;
    unsigned long long o;
    int s, tracked = -1;

    if (sscanf(line, "%lx-%lx %*s %llx", &lo, &hi, &o) != 3 || o != off || !strstr(line, name))
      continue;
    LOCK(t);
    for (s = 0; s < FZ_MAX_SLOTS; s++)
      if (t->proc->slots[s].used && (uintptr_t)t->proc->slots[s].map == lo)
        tracked = s;
    UNLOCK(t);
    n += (size_t)snprintf(out + n, n < sizeof(out) ? sizeof(out) - n : 0,
                          "{%lx-%lx tracked by slot %d} ", lo, hi, tracked);
  }
  if (f)
    fclose(f);
  return out[0] ? out : "none";
}

/* The /proc/self/maps lines overlapping [addr, addr + len), joined, for a finding's message. */
static const char *maps_overlapping(const void *addr, uint64_t len) {
  static __thread char out[768];
  FILE *f = fopen("/proc/self/maps", "r");
  uintptr_t a = (uintptr_t)addr;
  char line[256];
  size_t off = 0;

  out[0] = 0;
  while (f && fgets(line, sizeof(line), f)) {
    unsigned long lo, hi;

    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo < a + len && hi > a && off < sizeof(out)) {
      line[strcspn(line, "\n")] = 0;
      off += (size_t)snprintf(out + off, sizeof(out) - off, "{%s} ", line);
    }
  }
  if (f)
    fclose(f);
  return out;
}

static int errno_of(long ret) {
  return ret < 0 ? errno : 0;
}

/* ---- open / close / info ------------------------------------------------- */

static void op_open(struct fz_thread *t) {
  const struct fz_config *cfg = t->proc->cfg;
  unsigned int dev = (unsigned int)fz_below(t, cfg->ndev);
  bool rdonly = fz_below(t, 8) == 0;
  char path[64];
  int fd, f;

  if (fz_below(t, 16) == 0) {
    /* A node that does not exist. */
    fz_trace(t, "open-missing", PHXFS_MAX_DEVICES - 1, 0, 0);
    fd = open(PHXFS_DEVICE_PREFIX "63", O_RDWR | O_CLOEXEC);
    fz_trace_result(t, fd);
    fz_expect(t, errno_of(fd), ENOENT, FZ_ANY, "open of a missing node");
    return;
  }
  snprintf(path, sizeof(path), PHXFS_DEVICE_PREFIX "%u", cfg->dev[dev].index);
  fz_trace(t, "open", cfg->dev[dev].index, rdonly, 0);
  fd = open(path, (rdonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  fz_trace_result(t, fd);
  fz_expect(t, errno_of(fd), 0, FZ_ANY, "open");
  LOCK(t);
  for (f = 0; f < FZ_MAX_FILES; f++) {
    if (!t->proc->files[f].used) {
      t->proc->files[f] = (struct fz_file){
          .used = true, .fd = fd, .dev = dev, .gen = ++t->proc->next_gen, .rdonly = rdonly};
      UNLOCK(t);
      return;
    }
  }
  UNLOCK(t);
  close(fd); /* table full */
}

static void op_close(struct fz_thread *t) {
  struct fz_proc *p = t->proc;
  struct fz_slot *orphans[FZ_MAX_SLOTS];
  int f, fd, n = 0, s, ret;

  LOCK(t);
  f = pick_file(t);
  if (f < 0) {
    UNLOCK(t);
    return;
  }
  fd = p->files[f].fd;
  p->files[f].used = false;
  p->files[f].gen = ++p->next_gen;
  for (s = 0; s < FZ_MAX_SLOTS; s++) {
    struct fz_slot *sl = &p->slots[s];

    if (sl->used && sl->file == f && sl->file_gen != p->files[f].gen && sl->registered) {
      /* Its registration now lives until its mapping goes (the VMA holds the file). */
      sl->registered = false;
      sl->gen++;
      orphans[n++] = sl;
    }
  }
  UNLOCK(t);
  fz_trace(t, "close", (uint64_t)fd, (uint64_t)n, 0);
  /*
   * Drops our reference like close(), but the number stays taken (by
   * /dev/null): an operation that snapshotted it must not reach a file
   * opened later on another device, whose handles may have the same values.
   */
  ret = dup3(t->proc->devnull, fd, O_CLOEXEC) < 0 ? -1 : 0;
  fz_trace_result(t, ret);
  fz_expect(t, errno_of(ret), 0, FZ_ANY, "close");
  while (n--) {
    if (!pthread_mutex_trylock(&orphans[n]->map_lock)) {
      slot_maybe_free(t, orphans[n]);
      pthread_mutex_unlock(&orphans[n]->map_lock);
    }
  }
}

static void op_info(struct fz_thread *t) {
  const struct fz_config *cfg = t->proc->cfg;
  struct phxfs_info info;
  unsigned int variant = (unsigned int)fz_below(t, 6), dev;
  uint32_t gen;
  int f, fd, want = 0, got;
  long ret;

  LOCK(t);
  f = pick_file(t);
  if (f < 0) {
    UNLOCK(t);
    return;
  }
  fd = t->proc->files[f].fd;
  gen = t->proc->files[f].gen;
  dev = t->proc->files[f].dev;
  UNLOCK(t);
  memset(&info, 0, sizeof(info));
  info.abi_version = PHXFS_ABI_VERSION;
  info.argsz = sizeof(info);
  if (variant == 3) {
    /* 0 is no version; any newer one is answered with the module's. */
    info.abi_version = fz_below(t, 2) ? 0 : PHXFS_ABI_VERSION + 1 + (uint32_t)fz_below(t, 1000);
    want = info.abi_version ? 0 : EPROTO;
  } else if (variant == 4) {
    info.argsz = (uint32_t)fz_below(t, sizeof(info));
    want = EINVAL;
  }
  fz_trace(t, "info", (uint64_t)fd, variant, 0);
  if (variant == 5) {
    ret = ioctl(fd, PHXFS_IOC_GET_INFO, NULL);
    want = EFAULT;
  } else {
    ret = ioctl(fd, PHXFS_IOC_GET_INFO, &info);
  }
  got = errno_of(ret);
  fz_trace_result(t, ret);
  if (!file_same(t, f, gen))
    return;
  fz_expect(t, got, want, FZ_ANY, "GET_INFO");
  if (got)
    return;
  {
    const struct fz_device *d = &cfg->dev[dev];
    uint64_t pages = d->bar_size / d->page_size;

    if (info.abi_version != PHXFS_ABI_VERSION || !(info.features & PHXFS_FEATURE_ABI_RANGE))
      fz_fail(t, "GET_INFO dev%u: abi_version %u features %#llx", d->index, info.abi_version,
              (unsigned long long)info.features);
    if (info.device_index != d->index || info.bar_size != d->bar_size ||
        info.page_size != d->page_size || info.provider != PHXFS_PROVIDER_PCIBAR)
      fz_fail(t, "GET_INFO dev%u: index %u bar %llu page %u provider %u", d->index,
              info.device_index, (unsigned long long)info.bar_size, info.page_size, info.provider);
    if (info.regs_live > pages || info.pages_mapped > pages || info.regs_live > info.regs_total)
      fz_fail(t, "GET_INFO dev%u counters out of range: live %llu total %llu mapped %llu", d->index,
              (unsigned long long)info.regs_live, (unsigned long long)info.regs_total,
              (unsigned long long)info.pages_mapped);
  }
}

static void op_bad_ioctl(struct fz_thread *t) {
  unsigned int nr = 4 + (unsigned int)fz_below(t, 250), variant = (unsigned int)fz_below(t, 3);
  unsigned long cmd;
  char buf[256] = {0};
  uint32_t gen;
  int f, fd;
  long ret;

  LOCK(t);
  f = pick_file(t);
  if (f < 0) {
    UNLOCK(t);
    return;
  }
  fd = t->proc->files[f].fd;
  gen = t->proc->files[f].gen;
  UNLOCK(t);
  if (variant == 0)
    cmd = _IOWR(PHXFS_IOC_MAGIC, nr, struct phxfs_info);
  else if (variant == 1) /* a known number with another size */
    cmd = _IOC(_IOC_READ | _IOC_WRITE, PHXFS_IOC_MAGIC, 1 + fz_below(t, 3), 8 + fz_below(t, 64));
  else
    cmd = _IO(PHXFS_IOC_MAGIC, nr);
  if (cmd == PHXFS_IOC_GET_INFO || cmd == PHXFS_IOC_REGISTER || cmd == PHXFS_IOC_DEREGISTER)
    return; /* drew a real one */
  fz_trace(t, "bad-ioctl", (uint64_t)fd, cmd, 0);
  ret = ioctl(fd, cmd, buf);
  fz_trace_result(t, ret);
  if (file_same(t, f, gen))
    fz_expect(t, errno_of(ret), ENOTTY, FZ_ANY, "unknown ioctl");
}

/* ---- register / deregister ----------------------------------------------- */

static void record_registration(struct fz_thread *t, int f, uint32_t fgen,
                                const struct phxfs_register *r) {
  struct fz_proc *p = t->proc;
  int s;

  LOCK(t);
  if (!p->files[f].used || p->files[f].gen != fgen) {
    /* Closed meanwhile: the registration died with the file. */
    UNLOCK(t);
    return;
  }
  for (s = 0; s < FZ_MAX_SLOTS; s++) {
    struct fz_slot *sl = &p->slots[s];

    if (sl->used)
      continue;
    sl->used = true;
    sl->registered = true;
    sl->file = f;
    sl->fd = p->files[f].fd;
    sl->dev = p->files[f].dev;
    sl->file_gen = fgen;
    sl->gen++;
    sl->handle = r->handle;
    sl->mmap_off = r->mmap_offset;
    sl->len = r->length;
    sl->dev_addr = r->device_addr;
    sl->map = NULL;
    sl->prot = 0;
    sl->dofork = false;
    sl->rdonly = p->files[f].rdonly;
    publish_handle(t, p->files[f].dev, r->handle, r->length);
    UNLOCK(t);
    return;
  }
  UNLOCK(t);
  /* Table full: nobody could name it later (and other ops assume that). */
  if (phx_deregister(p->files[f].fd, r->handle) && file_same(t, f, fgen))
    fz_fail(t, "DEREGISTER of an untracked registration failed");
}

static uint64_t pick_pages(struct fz_thread *t, const struct fz_device *d) {
  uint64_t max = (d->bar_size - d->lo) / d->page_size;

  switch (fz_below(t, 6)) {
    case 0:
      return 1;
    case 1:
      return 2 + fz_below(t, 3);
    case 2:
      return 16 + fz_below(t, 2);
    case 3:
      return max < 64 ? max : 64;
    case 4:
      return max;
    default:
      return 1 + fz_below(t, max < 256 ? max : 256);
  }
}

static void op_register(struct fz_thread *t) {
  const struct fz_config *cfg = t->proc->cfg;
  const struct fz_device *d;
  struct phxfs_register r;
  uint64_t npages, slots;
  uint32_t gen;
  int f, fd, got;
  bool rdonly;

  LOCK(t);
  f = pick_file(t);
  if (f < 0) {
    UNLOCK(t);
    return;
  }
  fd = t->proc->files[f].fd;
  gen = t->proc->files[f].gen;
  rdonly = t->proc->files[f].rdonly;
  d = &cfg->dev[t->proc->files[f].dev];
  UNLOCK(t);
  npages = pick_pages(t, d);
  slots = (d->bar_size - d->lo) / d->page_size - npages + 1;
  memset(&r, 0, sizeof(r));
  r.abi_version = PHXFS_ABI_VERSION;
  r.argsz = sizeof(r);
  r.length = npages * d->page_size;
  /* Last pages of the BAR one time in four: the upper boundary. */
  r.device_addr = d->lo + (fz_below(t, 4) ? fz_below(t, slots) : slots - 1) * d->page_size;
  fz_trace(t, "register", (uint64_t)fd, r.device_addr, r.length);
  got = ioctl(fd, PHXFS_IOC_REGISTER, &r) ? errno : 0;
  fz_trace_result(t, got ? -got : (long)r.handle);
  if (!file_same(t, f, gen))
    return;
  /* A read-only open cannot pin pages (docs/security.md). */
  if (rdonly)
    fz_expect(t, got, EBADF, FZ_ANY, "REGISTER on a read-only open");
  else
    fz_expect(t, got, 0, EBUSY, "REGISTER of a valid range");
  if (!got) {
    if (r.mmap_offset != r.handle << 12)
      fz_fail(t, "REGISTER: mmap_offset %#llx for handle %#llx", (unsigned long long)r.mmap_offset,
              (unsigned long long)r.handle);
    record_registration(t, f, gen, &r);
  }
}

static void op_register_bad(struct fz_thread *t) {
  const struct fz_config *cfg = t->proc->cfg;
  const struct fz_device *d;
  struct phxfs_register r, *arg = &r;
  unsigned int variant = (unsigned int)fz_below(t, 16);
  uint64_t pg;
  uint32_t gen;
  int f, fd, got, want = 0, alt = FZ_ANY;
  void *ro = NULL;
  bool rdonly;

  LOCK(t);
  f = pick_file(t);
  if (f < 0) {
    UNLOCK(t);
    return;
  }
  fd = t->proc->files[f].fd;
  gen = t->proc->files[f].gen;
  rdonly = t->proc->files[f].rdonly;
  d = &cfg->dev[t->proc->files[f].dev];
  UNLOCK(t);
  pg = d->page_size;
  memset(&r, 0, sizeof(r));
  r.abi_version = PHXFS_ABI_VERSION;
  r.argsz = sizeof(r);
  r.device_addr = d->lo;
  r.length = pg;
  switch (variant) {
    case 0:
      r.abi_version = (uint32_t)fz_rand(t) | 2;
      want = EPROTO;
      break;
    case 1:
      r.argsz = (uint32_t)fz_below(t, sizeof(r));
      want = EINVAL;
      break;
    case 2:
      r.flags = 1u << fz_below(t, 32);
      want = EINVAL;
      break;
    case 3:
      r.pad = (uint32_t)fz_rand(t) | 1;
      want = EINVAL;
      break;
    case 4:
      r.reserved = fz_rand(t) | 1;
      want = EINVAL;
      break;
    case 5:
      r.length = 0;
      want = EINVAL;
      break;
    case 6: {
      static const uint64_t odd[] = {1, 511, 4095, 4097, 12289};

      r.length = odd[fz_below(t, 5)];
      want = EINVAL;
      break;
    }
    case 7:
      r.device_addr = d->lo + 1 + fz_below(t, pg - 1);
      want = EINVAL;
      break;
    case 8: /* wraps */
      r.device_addr = ~(pg - 1) - fz_below(t, 4) * pg;
      r.length = (5 + fz_below(t, 16)) * pg;
      want = EOVERFLOW;
      break;
    case 9: /* larger than the BAR */
      r.device_addr = 0;
      r.length = fz_below(t, 2) ? d->bar_size + pg : (1ULL << (40 + fz_below(t, 22)));
      want = ERANGE;
      break;
    case 10: /* starts at or past the end */
      r.device_addr = d->bar_size + fz_below(t, 4) * pg;
      want = ERANGE;
      break;
    case 11: /* runs past the end */
      r.device_addr = d->bar_size - pg;
      r.length = 2 * pg;
      want = ERANGE;
      break;
    case 12:
      arg = NULL;
      want = EFAULT;
      break;
    case 13: /* the handle cannot be copied out: the registration must be undone */
      ro = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (ro == MAP_FAILED)
        return;
      r.device_addr = d->lo + fz_below(t, (d->bar_size - d->lo) / pg) * pg;
      memcpy(ro, &r, sizeof(r));
      mprotect(ro, 4096, PROT_READ);
      arg = ro;
      want = EFAULT;
      alt = EBUSY;
      break;
    case 14: /* abi field garbage and everything else too */
      r.abi_version = 0;
      r.argsz = 0;
      r.flags = ~0u;
      r.length = 0;
      want = EPROTO;
      break;
    default: /* argsz larger than we know is fine; then the range decides */
      r.argsz = sizeof(r) + 8 + (uint32_t)fz_below(t, 4096);
      r.device_addr = d->bar_size - pg;
      r.length = pg;
      want = 0;
      alt = EBUSY;
      break;
  }
  /* The open mode is checked before the argument is even read. */
  if (rdonly) {
    want = EBADF;
    alt = FZ_ANY;
  }
  fz_trace(t, "register-bad", variant, r.device_addr, r.length);
  got = ioctl(fd, PHXFS_IOC_REGISTER, arg) ? errno : 0;
  fz_trace_result(t, got ? -got : (long)r.handle);
  if (ro)
    munmap(ro, 4096);
  if (!file_same(t, f, gen))
    return;
  fz_expect(t, got, want, alt, "REGISTER with a bad argument");
  if (!got)
    record_registration(t, f, gen, &r);
}

/* After our own successful DEREGISTER, the mapping must be unbacked. */
static void check_revoked(struct fz_thread *t, struct fz_slot *sl, uint32_t gen) {
  bool same;
  int sig;

  if (pthread_mutex_trylock(&sl->map_lock))
    return;
  LOCK(t);
  same = sl->used && sl->gen == gen; /* not reused for a new registration meanwhile */
  UNLOCK(t);
  if (same && sl->map && (sl->prot & PROT_READ)) {
    sig = fz_guarded_touch(sl->map + fz_below(t, sl->len));
    if (sig != SIGBUS)
      fz_fail(t, "touching a deregistered mapping gave signal %d, want SIGBUS", sig);
  }
  pthread_mutex_unlock(&sl->map_lock);
}

static void op_deregister(struct fz_thread *t) {
  struct fz_proc *p = t->proc;
  struct phxfs_deregister args = {.abi_version = PHXFS_ABI_VERSION, .argsz = sizeof(args)};
  struct fz_slot *sl;
  uint32_t fgen, gen;
  int s, f, fd, got;

  LOCK(t);
  s = pick_slot(t, -1);
  if (s < 0) {
    UNLOCK(t);
    return;
  }
  sl = &p->slots[s];
  sl->registered = false;
  gen = ++sl->gen;
  f = sl->file;
  fgen = sl->file_gen;
  fd = sl->fd;
  args.handle = sl->handle;
  UNLOCK(t);
  fz_trace(t, "deregister", (uint64_t)fd, args.handle, 0);
  got = ioctl(fd, PHXFS_IOC_DEREGISTER, &args) ? errno : 0;
  fz_trace_result(t, -got);
  if (file_same(t, f, fgen)) {
    fz_expect(t, got, 0, FZ_ANY, "DEREGISTER of a live handle");
    check_revoked(t, sl, gen);
  }
  if (!pthread_mutex_trylock(&sl->map_lock)) {
    slot_maybe_free(t, sl);
    pthread_mutex_unlock(&sl->map_lock);
  }
}

static void op_deregister_bad(struct fz_thread *t) {
  struct fz_proc *p = t->proc;
  struct fz_shared *sh = p->shared;
  struct phxfs_deregister args = {.abi_version = PHXFS_ABI_VERSION, .argsz = sizeof(args)};
  unsigned int variant = (unsigned int)fz_below(t, 6), dev;
  uint32_t gen;
  int f, fd, got, want = ENOENT;

  LOCK(t);
  f = pick_file(t);
  if (f < 0) {
    UNLOCK(t);
    return;
  }
  fd = p->files[f].fd;
  gen = p->files[f].gen;
  dev = p->files[f].dev;
  UNLOCK(t);
  switch (variant) {
    case 0: /* never issued: handles count up from 0 by pages */
      args.handle = (1ULL << 40) + fz_rand(t) % (1ULL << 62);
      break;
    case 1: { /* another process's (or our dead) handle on the same device */
      unsigned int i = (unsigned int)fz_below(t, FZ_SHARED_HANDLES);
      uint64_t h = sh->handles[i].handle;

      if (!h || sh->handles[i].dev != dev || own_handle(t, dev, h))
        return;
      args.handle = h;
      break;
    }
    case 2:
      args.reserved[fz_below(t, 2)] = fz_rand(t) | 1;
      want = EINVAL;
      break;
    case 3:
      args.abi_version = 0;
      want = EPROTO;
      break;
    case 4:
      args.argsz = (uint32_t)fz_below(t, sizeof(args));
      want = EINVAL;
      break;
    default:
      args.handle = ~0ULL;
      break;
  }
  if (variant >= 2 && variant <= 4) {
    /* Validation comes first: a live handle must survive a malformed call. */
    LOCK(t);
    int s = pick_slot(t, -1);

    args.handle = s >= 0 && p->slots[s].fd == fd ? p->slots[s].handle : 12345;
    UNLOCK(t);
  }
  fz_trace(t, "deregister-bad", variant, args.handle, (uint64_t)fd);
  got = ioctl(fd, PHXFS_IOC_DEREGISTER, &args) ? errno : 0;
  fz_trace_result(t, -got);
  if (file_same(t, f, gen) && (variant != 1 || got != 0))
    fz_expect(t, got, want, FZ_ANY, "DEREGISTER with a bad argument");
  else if (variant == 1 && got == 0)
    fz_fail(t, "DEREGISTER of another process's handle %#llx succeeded",
            (unsigned long long)args.handle);
}

/* ---- mmap family ---------------------------------------------------------- */

static void op_mmap(struct fz_thread *t) {
  struct fz_proc *p = t->proc;
  struct fz_slot *sl;
  bool rdonly;
  uint32_t gen;
  int s, prot, got, want;
  void *m;

  LOCK(t);
  s = pick_slot(t, 0);
  if (s < 0) {
    UNLOCK(t);
    return;
  }
  sl = &p->slots[s];
  UNLOCK(t);
  WAITING(t, "map_lock");
  pthread_mutex_lock(&sl->map_lock);
  WAITING(t, NULL);
  LOCK(t);
  if (!sl->used || !sl->registered || sl->map) {
    UNLOCK(t);
    pthread_mutex_unlock(&sl->map_lock);
    return;
  }
  gen = sl->gen;
  rdonly = sl->rdonly;
  UNLOCK(t);
  prot = (rdonly && fz_below(t, 2)) ? PROT_READ : PROT_READ | PROT_WRITE;
  /* A read-only open gets no VM_SHARED mapping, which phxfs refuses: map only read-write opens. */
  want = !rdonly ? 0 : (prot & PROT_WRITE) ? EACCES : EINVAL;
  fz_trace(t, "mmap", (uint64_t)sl->fd, sl->mmap_off, sl->len);
  m = mmap(NULL, sl->len, prot, MAP_SHARED, sl->fd, (off_t)sl->mmap_off);
  got = m == MAP_FAILED ? errno : 0;
  fz_trace_result(t, got ? -got : (long)(uintptr_t)m);
  if (!got) {
    LOCK(t);
    sl->map = m;
    sl->prot = prot;
    UNLOCK(t);
  }
  if (slot_live(t, sl, gen) && got == EBUSY)
    fz_fail(t,
            "mmap of an unmapped registration (slot %d): EBUSY; our mappings of offset %#llx: %s",
            (int)(sl - p->slots), (unsigned long long)sl->mmap_off,
            maps_with_offset(t, sl->dev, sl->mmap_off));
  if (slot_live(t, sl, gen))
    fz_expect(t, got, want, FZ_ANY, "mmap of a registration");
  if (got)
    slot_maybe_free(t, sl);
  pthread_mutex_unlock(&sl->map_lock);
}

static void op_mmap_bad(struct fz_thread *t) {
  struct fz_proc *p = t->proc;
  struct fz_shared *sh = p->shared;
  unsigned int variant = (unsigned int)fz_below(t, 7);
  uint64_t len, off;
  struct fz_slot *sl;
  uint32_t gen;
  int s, fd, prot = PROT_READ | PROT_WRITE, flags = MAP_SHARED, got, want = EINVAL;
  void *m;

  LOCK(t);
  s = pick_slot(t, -1);
  if (s < 0) {
    UNLOCK(t);
    return;
  }
  sl = &p->slots[s];
  UNLOCK(t);
  WAITING(t, "map_lock");
  pthread_mutex_lock(&sl->map_lock);
  WAITING(t, NULL);
  LOCK(t);
  if (!sl->used || !sl->registered || sl->rdonly) {
    UNLOCK(t);
    pthread_mutex_unlock(&sl->map_lock);
    return;
  }
  gen = sl->gen;
  fd = sl->fd;
  len = sl->len;
  off = sl->mmap_off;
  UNLOCK(t);
  switch (variant) {
    case 0:
      len = len > 4096 && fz_below(t, 2) ? len - 4096 : len + 4096;
      break;
    case 1:
      flags = MAP_PRIVATE;
      break;
    case 2:
      prot |= PROT_EXEC;
      want = EPERM;
      break;
    case 3:
      off += 4096; /* inside the registration, not its start */
      len = 4096;
      break;
    case 4:
      if (!sl->map)
        goto out; /* mapping it twice needs a first mapping */
      want = EBUSY;
      break;
    case 5: { /* another process's registration on the same device */
      unsigned int i = (unsigned int)fz_below(t, FZ_SHARED_HANDLES);

      if (!sh->handles[i].handle || sh->handles[i].dev != sl->dev ||
          own_handle(t, sl->dev, sh->handles[i].handle))
        goto out;
      off = sh->handles[i].handle << 12;
      len = sh->handles[i].len;
      break;
    }
    default:
      off = (fz_rand(t) & ~0xfffULL) >> 4;
      want = FZ_FAILS;
      break;
  }
  fz_trace(t, "mmap-bad", variant, off, len);
  m = mmap(NULL, len, prot, flags, fd, (off_t)off);
  got = m == MAP_FAILED ? errno : 0;
  fz_trace_result(t, got ? -got : (long)(uintptr_t)m);
  if (!got)
    munmap(m, len);
  if (got == 0)
    fz_fail(t, "mmap with bad arguments (variant %u) succeeded", variant);
  if (slot_live(t, sl, gen))
    fz_expect(t, got, want, FZ_ANY, "mmap with bad arguments");
out:
  pthread_mutex_unlock(&sl->map_lock);
}

/* Picks a mapped slot and takes its map_lock; NULL if none. */
static struct fz_slot *lock_mapped_slot(struct fz_thread *t, uint32_t *gen) {
  struct fz_slot *sl;
  int s;

  LOCK(t);
  s = pick_slot(t, 1);
  if (s < 0) {
    UNLOCK(t);
    return NULL;
  }
  sl = &t->proc->slots[s];
  UNLOCK(t);
  WAITING(t, "map_lock");
  pthread_mutex_lock(&sl->map_lock);
  WAITING(t, NULL);
  LOCK(t);
  if (!sl->used || !sl->map) {
    UNLOCK(t);
    pthread_mutex_unlock(&sl->map_lock);
    return NULL;
  }
  *gen = sl->gen;
  UNLOCK(t);
  return sl;
}

static void op_munmap(struct fz_thread *t) {
  struct fz_slot *sl;
  uint32_t gen;
  int ret;

  sl = lock_mapped_slot(t, &gen);
  if (!sl)
    return;
  if (sl->len > 4096 && fz_below(t, 3) == 0) {
    /* Partial: a registration is mapped whole or not at all. */
    uint64_t cut = (1 + fz_below(t, sl->len / 4096 - 1)) * 4096;

    fz_trace(t, "munmap-part", (uint64_t)(uintptr_t)sl->map, cut, sl->len);
    ret = fz_below(t, 2) ? munmap(sl->map, cut) : munmap(sl->map + cut, sl->len - cut);
    fz_trace_result(t, ret);
    fz_expect(t, errno_of(ret), EINVAL, FZ_ANY, "partial munmap");
    if ((sl->prot & PROT_READ) && (fz_guarded_touch(sl->map) == SIGSEGV ||
                                   fz_guarded_touch(sl->map + sl->len - 1) == SIGSEGV))
      fz_fail(t, "a refused partial munmap left a hole");
  } else {
    fz_trace(t, "munmap", (uint64_t)(uintptr_t)sl->map, sl->len, 0);
    ret = munmap(sl->map, sl->len);
    fz_trace_result(t, ret);
    if (ret)
      fz_fail(t, "munmap of a whole mapping (offset %#llx): %s; maps: %s",
              (unsigned long long)sl->mmap_off, strerror(errno),
              maps_overlapping(sl->map, sl->len));
    LOCK(t);
    sl->map = NULL;
    UNLOCK(t);
    slot_maybe_free(t, sl);
  }
  pthread_mutex_unlock(&sl->map_lock);
}

static void op_mprotect(struct fz_thread *t) {
  static const int prots[] = {PROT_READ, PROT_NONE, PROT_READ | PROT_WRITE, PROT_READ | PROT_EXEC};
  struct fz_slot *sl;
  uint32_t gen;
  int prot, ret, want;
  bool partial;

  sl = lock_mapped_slot(t, &gen);
  if (!sl)
    return;
  prot = prots[fz_below(t, 4)];
  partial = sl->len > 4096 && fz_below(t, 4) == 0;
  fz_trace(t, "mprotect", (uint64_t)(uintptr_t)sl->map, (uint64_t)prot, partial);
  ret = mprotect(sl->map, partial ? 4096 : sl->len, prot);
  fz_trace_result(t, ret);
  /* No VM_MAYEXEC ever; a read-only open never had VM_MAYWRITE; no split. */
  want = ((prot & PROT_EXEC) || (sl->rdonly && (prot & PROT_WRITE))) ? EACCES
         : partial && prot != sl->prot                               ? FZ_FAILS
                                                                     : 0;
  fz_expect(t, errno_of(ret), want, FZ_ANY, "mprotect");
  if (!ret && !partial)
    sl->prot = prot;
  pthread_mutex_unlock(&sl->map_lock);
}

static void op_madvise(struct fz_thread *t) {
  static const int advice[] = {MADV_DONTNEED,
                               MADV_DONTFORK,
                               MADV_DOFORK,
                               MADV_WILLNEED,
                               MADV_NORMAL,
                               MADV_RANDOM,
                               MADV_SEQUENTIAL,
                               MADV_COLD,
                               MADV_PAGEOUT,
                               MADV_FREE,
                               MADV_REMOVE,
                               MADV_HUGEPAGE,
                               MADV_NOHUGEPAGE,
                               MADV_DONTDUMP,
                               MADV_DODUMP,
                               MADV_WIPEONFORK,
                               MADV_KEEPONFORK,
                               MADV_MERGEABLE,
                               MADV_UNMERGEABLE,
                               22 /* POPULATE_READ */,
                               23 /* POPULATE_WRITE */};
  struct fz_slot *sl;
  uint32_t gen;
  int adv, ret, want = FZ_ANY;
  bool partial;

  sl = lock_mapped_slot(t, &gen);
  if (!sl)
    return;
  adv = advice[fz_below(t, sizeof(advice) / sizeof(advice[0]))];
  partial = sl->len > 4096 && fz_below(t, 4) == 0;
  fz_trace(t, "madvise", (uint64_t)(uintptr_t)sl->map, (uint64_t)adv, partial);
  ret = madvise(sl->map, partial ? 4096 : sl->len, adv);
  fz_trace_result(t, ret);
  if (adv == MADV_DONTNEED)
    want = 0;
  else if (adv == MADV_DODUMP && !partial)
    want = EINVAL; /* VM_DONTDUMP stays: core dumps never read the BAR */
  fz_expect(t, errno_of(ret), want, FZ_ANY, "madvise");
  if (!ret && adv == MADV_DOFORK)
    sl->dofork = true;
  if (!ret && adv == MADV_DONTFORK && !partial)
    sl->dofork = false;
  pthread_mutex_unlock(&sl->map_lock);
}

static void op_mremap(struct fz_thread *t) {
  unsigned int variant = (unsigned int)fz_below(t, 4);
  struct fz_slot *sl;
  uint32_t gen;
  void *dest = NULL, *m;
  int got;

  sl = lock_mapped_slot(t, &gen);
  if (!sl)
    return;
  fz_trace(t, "mremap", (uint64_t)(uintptr_t)sl->map, variant, sl->len);
  switch (variant) {
    case 0: /* move whole */
      dest = mmap(NULL, sl->len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (dest == MAP_FAILED)
        break;
      m = mremap(sl->map, sl->len, sl->len, MREMAP_MAYMOVE | MREMAP_FIXED, dest);
      got = m == MAP_FAILED ? errno : 0;
      fz_trace_result(t, got ? -got : (long)(uintptr_t)m);
      if (got) {
        munmap(dest, sl->len);
      } else {
        LOCK(t);
        sl->map = m;
        UNLOCK(t);
      }
      break;
    case 1: /* grow: VM_DONTEXPAND */
      m = mremap(sl->map, sl->len, sl->len + 4096, MREMAP_MAYMOVE);
      got = m == MAP_FAILED ? errno : 0;
      fz_trace_result(t, got ? -got : (long)(uintptr_t)m);
      if (!got) {
        munmap(m, sl->len + 4096);
        LOCK(t);
        sl->map = NULL;
        UNLOCK(t);
      }
      fz_expect(t, got, FZ_FAILS, FZ_ANY, "mremap growing a registration");
      break;
    case 2: /* shrink: would split */
      if (sl->len <= 4096)
        break;
      m = mremap(sl->map, sl->len, sl->len - 4096, 0);
      got = m == MAP_FAILED ? errno : 0;
      fz_trace_result(t, got ? -got : (long)(uintptr_t)m);
      if (!got) {
        munmap(m, sl->len - 4096);
        LOCK(t);
        sl->map = NULL;
        UNLOCK(t);
      }
      fz_expect(t, got, FZ_FAILS, FZ_ANY, "mremap shrinking a registration");
      break;
    default: /* duplicate (old_len 0) */
      m = mremap(sl->map, 0, sl->len, MREMAP_MAYMOVE);
      got = m == MAP_FAILED ? errno : 0;
      fz_trace_result(t, got ? -got : (long)(uintptr_t)m);
      if (!got)
        munmap(m, sl->len);
      fz_expect(t, got, FZ_FAILS, FZ_ANY, "mremap duplicating a registration");
      break;
  }
  slot_maybe_free(t, sl);
  pthread_mutex_unlock(&sl->map_lock);
}

/* ---- I/O into device memory --------------------------------------------- */

struct io_target {
  struct fz_slot *sl;
  uint32_t gen;
  int prot;
  uint64_t off, len;
};

/* Locks a mapped slot and picks a 512-aligned range of it. */
static bool lock_io_target(struct fz_thread *t, struct io_target *io) {
  struct fz_slot *sl;
  uint64_t max;
  int s;

  LOCK(t);
  s = pick_slot(t, 1);
  if (s < 0) {
    UNLOCK(t);
    return false;
  }
  sl = &t->proc->slots[s];
  UNLOCK(t);
  WAITING(t, "map_lock");
  pthread_mutex_lock(&sl->map_lock);
  WAITING(t, NULL);
  LOCK(t);
  if (!sl->used || !sl->map) {
    UNLOCK(t);
    pthread_mutex_unlock(&sl->map_lock);
    return false;
  }
  io->sl = sl;
  io->gen = sl->registered ? sl->gen : sl->gen + 1; /* never live if not registered */
  io->prot = sl->prot;
  UNLOCK(t);
  io->off = fz_below(t, sl->len / 512) * 512;
  max = sl->len - io->off < FZ_IO_MAX ? sl->len - io->off : FZ_IO_MAX;
  io->len = (1 + fz_below(t, max / 512)) * 512;
  return true;
}

static uint64_t raw_offset(struct fz_thread *t, uint64_t len) {
  return fz_below(t, (fz_raw_size - len) / 512) * 512;
}

static void op_pread(struct fz_thread *t) {
  bool verify = fz_below(t, 2), from_raw = fz_below(t, 3) != 0, misaligned = fz_below(t, 16) == 0;
  struct io_target io;
  uint64_t src_off;
  int src, want, sig;
  ssize_t n;
  size_t diff;

  if (!lock_io_target(t, &io))
    return;
  src = from_raw ? t->raw : t->scratch;
  src_off = from_raw ? raw_offset(t, io.len) : t->scratch_off + fz_below(t, 4) * 512;
  if (!from_raw && io.len > FZ_SCRATCH_PER_THREAD - 2048)
    io.len = 512;
  if (misaligned)
    io.len = io.len - 512 + 1 + fz_below(t, 511);
  fz_trace(t, from_raw ? "pread-raw" : "pread-scratch", io.off, io.len, src_off);
  n = pread(src, io.sl->map + io.off, io.len, (off_t)src_off);
  fz_trace_result(t, n < 0 ? -errno : n);
  want = (io.prot & PROT_WRITE) ? 0 : EFAULT;
  /* ext4 falls back to buffered I/O for misaligned O_DIRECT; a block device refuses it. */
  if (misaligned)
    want = from_raw ? EINVAL : FZ_ANY;
  if (slot_live(t, io.sl, io.gen)) {
    fz_expect(t, n < 0 ? errno : 0, want, FZ_ANY, "O_DIRECT pread into device memory");
    if (n >= 0 && (uint64_t)n != io.len)
      fz_fail(t, "pread returned %zd of %llu", n, (unsigned long long)io.len);
  }
  if (verify && n > 0) {
    if (!read_exact(src, t->ram, (size_t)n, src_off)) {
      sig = fz_guarded_cmp(io.sl->map + io.off, t->ram, (size_t)n, &diff);
      if (slot_live(t, io.sl, io.gen) && (sig || diff != (size_t)n))
        fz_fail(t, "device bytes after pread differ at +%zu of %zd (signal %d)", diff, n, sig);
    }
  }
  pthread_mutex_unlock(&io.sl->map_lock);
}

static void op_pwrite(struct fz_thread *t) {
  struct io_target io;
  uint64_t dst_off;
  int sig;
  ssize_t n;
  size_t diff;

  if (!lock_io_target(t, &io))
    return;
  if (io.len > FZ_SCRATCH_PER_THREAD / 2)
    io.len = FZ_SCRATCH_PER_THREAD / 2;
  dst_off = t->scratch_off + fz_below(t, 2) * (FZ_SCRATCH_PER_THREAD / 2);
  if (io.prot == (PROT_READ | PROT_WRITE))
    (void)fz_guarded_fill(io.sl->map + io.off, io.len, fz_rand(t));
  fz_trace(t, "pwrite-scratch", io.off, io.len, dst_off);
  n = pwrite(t->scratch, io.sl->map + io.off, io.len, (off_t)dst_off);
  fz_trace_result(t, n < 0 ? -errno : n);
  if (slot_live(t, io.sl, io.gen))
    fz_expect(t, n < 0 ? errno : 0, (io.prot & PROT_READ) ? 0 : EFAULT, FZ_ANY,
              "O_DIRECT pwrite from device memory");
  if (n > 0 && !read_exact(t->scratch, t->ram, (size_t)n, dst_off)) {
    sig = fz_guarded_cmp(io.sl->map + io.off, t->ram, (size_t)n, &diff);
    if (slot_live(t, io.sl, io.gen) && (sig || diff != (size_t)n))
      fz_fail(t, "file bytes after pwrite differ from device memory at +%zu of %zd (signal %d)",
              diff, n, sig);
  }
  pthread_mutex_unlock(&io.sl->map_lock);
}

static void op_uring(struct fz_thread *t) {
  struct io_uring *ring = t->ring;
  bool write = fz_below(t, 3) == 0, fixed = fz_below(t, 4) == 0;
  struct io_uring_sqe *sqe;
  struct io_uring_cqe *cqe;
  struct io_target io;
  struct iovec iov;
  uint64_t pos;
  int fd, res, reg = -1;

  if (!ring || !lock_io_target(t, &io))
    return;
  fd = write ? t->scratch : t->raw;
  if (write && io.len > FZ_SCRATCH_PER_THREAD / 2)
    io.len = FZ_SCRATCH_PER_THREAD / 2;
  pos = write ? t->scratch_off : raw_offset(t, io.len);
  if (fixed) {
    iov = (struct iovec){io.sl->map + io.off, io.len};
    fz_trace(t, "uring-register-buffers", io.off, io.len, 0);
    reg = io_uring_register_buffers(ring, &iov, 1);
    fz_trace_result(t, reg);
    /*
     * 6.1 refuses file-backed VMAs; a revoked or read-only range cannot be
     * pinned; with CONFIG_PCI_P2PDMA, GUP without FOLL_PCI_P2PDMA refuses
     * P2P pages (EREMOTEIO, which no other kernel returns here).
     */
    if (slot_live(t, io.sl, io.gen) && io.prot == (PROT_READ | PROT_WRITE) && -reg != EREMOTEIO)
      fz_expect(t, -reg, 0, EOPNOTSUPP, "io_uring_register_buffers over device memory");
    if (reg) {
      pthread_mutex_unlock(&io.sl->map_lock);
      return;
    }
  }
  sqe = io_uring_get_sqe(ring);
  if (fixed && write)
    io_uring_prep_write_fixed(sqe, fd, io.sl->map + io.off, (unsigned)io.len, pos, 0);
  else if (fixed)
    io_uring_prep_read_fixed(sqe, fd, io.sl->map + io.off, (unsigned)io.len, pos, 0);
  else if (write)
    io_uring_prep_write(sqe, fd, io.sl->map + io.off, (unsigned)io.len, pos);
  else
    io_uring_prep_read(sqe, fd, io.sl->map + io.off, (unsigned)io.len, pos);
  fz_trace(t, write ? "uring-write" : "uring-read", io.off, io.len, pos);
  res = io_uring_submit(ring);
  if (res == 1 && !io_uring_wait_cqe(ring, &cqe)) {
    res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    fz_trace_result(t, res);
    if (slot_live(t, io.sl, io.gen)) {
      int want = (io.prot & (write ? PROT_READ : PROT_WRITE)) ? 0 : EFAULT;

      /* A fixed buffer keeps its pages pinned even if the mapping's protection changes. */
      fz_expect(t, res < 0 ? -res : 0, fixed ? 0 : want, FZ_ANY, "io_uring transfer");
      if (res >= 0 && (uint64_t)res != io.len)
        fz_fail(t, "io_uring transferred %d of %llu", res, (unsigned long long)io.len);
    }
  } else {
    fz_trace_result(t, res);
  }
  if (fixed)
    io_uring_unregister_buffers(ring);
  pthread_mutex_unlock(&io.sl->map_lock);
}

static void op_touch(struct fz_thread *t) {
  struct io_target io;
  int sig;

  if (!lock_io_target(t, &io))
    return;
  fz_trace(t, "touch", io.off, io.len, (uint64_t)io.prot);
  if (io.prot == (PROT_READ | PROT_WRITE))
    sig = fz_guarded_fill(io.sl->map + io.off, io.len, io.off);
  else
    sig = fz_guarded_touch(io.sl->map + io.off);
  fz_trace_result(t, sig);
  if (slot_live(t, io.sl, io.gen) && io.prot != PROT_NONE && sig)
    fz_fail(t, "touching a live mapping (prot %d) raised signal %d", io.prot, sig);
  if (slot_live(t, io.sl, io.gen) && io.prot == PROT_NONE && sig != SIGSEGV)
    fz_fail(t, "touching a PROT_NONE mapping raised signal %d, want SIGSEGV", sig);
  pthread_mutex_unlock(&io.sl->map_lock);
}

/* ---- fork / exit / kill ------------------------------------------------- */

static void child_body(struct fz_thread *t, unsigned char *const *maps, int nmaps, int mode,
                       pid_t parent) {
  const struct fz_config *cfg = t->proc->cfg;
  const struct fz_device *d = &cfg->dev[fz_below(t, cfg->ndev)];
  struct phxfs_register r;
  char path[64];
  void *m;
  int i, fd;

  /*
   * A worker that dies (a finding, the run's SIGKILL) takes its children
   * along.  One killed between fork() and this prctl() leaves the child
   * orphaned without the signal: a mode 2 child then read forever, its
   * registration and the worker's inherited device files live after
   * every worker had exited (regs_live 2 pages_mapped 16 and no rmmod,
   * fuzz seed 619982326 on 6.1).
   */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(0);
  for (i = 0; i < nmaps; i++) {
    int sig = fz_guarded_touch(maps[i]);

    if (!sig)
      fz_fail(t, "a forked child read its parent's device mapping %p", (void *)maps[i]);
  }
  snprintf(path, sizeof(path), PHXFS_DEVICE_PREFIX "%u", d->index);
  fd = open(path, O_RDWR);
  if (fd < 0)
    fz_fail(t, "child: open %s: %s", path, strerror(errno));
  if (phx_register(fd, d->bar_size - 16 * 4096 * (1 + fz_below(t, 4)), 16 * 4096, &r))
    _exit(0); /* EBUSY: someone else has the range */
  m = phx_map(fd, &r);
  if (!m)
    fz_fail(t, "child: mmap: %s", strerror(errno));
  do {
    ssize_t n = pread(t->raw, m, 16 * 4096, (off_t)raw_offset(t, 16 * 4096));

    if (n != 16 * 4096)
      fz_fail(t, "child: pread %zd: %s", n, strerror(errno));
  } while (mode == 2);
  /* mode 0 and 1: exit with the registration live; the kernel tears it down. */
  _exit(0);
}

static void op_fork(struct fz_thread *t) {
  struct fz_slot *locked[FZ_MAX_SLOTS];
  unsigned char *maps[FZ_MAX_SLOTS];
  int nmaps = 0, i, s, status, mode = (int)fz_below(t, 3);
  pid_t pid, parent;

  /* The child touches maps that cannot change while fork() snapshots them. */
  LOCK(t);
  for (s = 0; s < FZ_MAX_SLOTS; s++) {
    struct fz_slot *sl = &t->proc->slots[s];

    if (sl->used && sl->map && (sl->prot & PROT_READ) && !pthread_mutex_trylock(&sl->map_lock)) {
      locked[nmaps] = sl;
      maps[nmaps++] = sl->map;
    }
  }
  UNLOCK(t);
  fz_trace(t, "fork", (uint64_t)nmaps, (uint64_t)mode, 0);
  parent = getpid();
  pid = fork();
  if (pid == 0) {
    t->rng ^= 0x5bd1e995;
    child_body(t, maps, nmaps, mode, parent);
  }
  fz_trace_result(t, pid);
  /* The child's address space is a snapshot taken by fork(): the maps may change now. */
  for (i = 0; i < nmaps; i++)
    pthread_mutex_unlock(&locked[i]->map_lock);
  if (pid > 0) {
    if (mode) {
      usleep((useconds_t)fz_below(t, 20000));
      kill(pid, SIGKILL);
    }
    if (waitpid(pid, &status, 0) != pid)
      fz_fail(t, "waitpid: %s", strerror(errno));
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
        !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && mode))
      fz_fail(t, "child ended with status %#x", status);
  }
}

/* ---- dispatch -------------------------------------------------------------- */

struct fz_op {
  void (*fn)(struct fz_thread *t);
  unsigned int weight;
};

static const struct fz_op ops[] = {
    {op_open, 6},      {op_close, 2},        {op_info, 4},       {op_bad_ioctl, 2},
    {op_register, 14}, {op_register_bad, 8}, {op_deregister, 7}, {op_deregister_bad, 4},
    {op_mmap, 12},     {op_mmap_bad, 5},     {op_munmap, 6},     {op_mprotect, 3},
    {op_madvise, 4},   {op_mremap, 3},       {op_pread, 12},     {op_pwrite, 7},
    {op_uring, 6},     {op_touch, 4},        {op_fork, 2},
};

void fz_step(struct fz_thread *t) {
  unsigned int total = 0, i, x;

  for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
    total += ops[i].weight;
  x = (unsigned int)fz_below(t, total);
  for (i = 0; x >= ops[i].weight; i++)
    x -= ops[i].weight;
  ops[i].fn(t);
}

void fz_thread_cleanup(struct fz_thread *t, bool tidy) {
  struct fz_proc *p = t->proc;
  int s, f;

  if (!tidy || t->id != 0)
    return;
  for (s = 0; s < FZ_MAX_SLOTS; s++) {
    struct fz_slot *sl = &p->slots[s];

    if (!sl->used)
      continue;
    if (sl->map && munmap(sl->map, sl->len))
      fz_fail(t, "cleanup munmap: %s", strerror(errno));
    if (sl->registered && phx_deregister(sl->fd, sl->handle))
      fz_fail(t, "cleanup DEREGISTER %#llx: %s", (unsigned long long)sl->handle, strerror(errno));
    sl->used = false;
  }
  for (f = 0; f < FZ_MAX_FILES; f++)
    if (p->files[f].used && close(p->files[f].fd))
      fz_fail(t, "cleanup close: %s", strerror(errno));
}
