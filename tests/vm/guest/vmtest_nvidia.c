// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_nvidia.c - the guest suite on phxfs's NVIDIA provider, driven by
 * the nvemu emulation (fake cudaMalloc/cudaFree over ivshmem #0's upper
 * half).  Modes match how guest.sh loaded the modules:
 *   persistent  nvemu first, phxfs with the default API choice;
 *   legacy      phxfs nv_api=legacy: pins carry a free callback;
 *   missing     phxfs loaded before nvemu: registrations must say ENODEV;
 *   appeared    nvemu loaded afterwards, phxfs not reloaded: works;
 *   refused     nvemu refuses persistent pins (as on MIG and vGPU), phxfs
 *               with the default API choice: REGISTER must refuse too, never
 *               fall back to revocable legacy pins;
 *   refused_legacy  the same with nv_api=legacy: legacy pins, reported.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvemu_uapi.h"
#include "vmtest.h"
#include "vmtest_fuse.h"
#include "vmtest_pcibar.h"
#include "vmtest_rdma.h"
#include "vmtest_uffd.h"

static const char *raw_path;
static uint64_t disk_size;
static uint64_t write_next;
static int emu = -1;
/* The pin REGISTER must report in this mode (phxfs_register.pin). */
static uint64_t want_pin = PHXFS_PIN_PERSISTENT;

static int emu_alloc(uint64_t len, uint32_t flags, struct nvemu_alloc *out) {
  memset(out, 0, sizeof(*out));
  out->length = len;
  out->flags = flags;
  return ioctl(emu, NVEMU_IOC_ALLOC, out) ? -errno : 0;
}

static int emu_free(uint64_t va) {
  struct nvemu_free f = {.va = va};

  return ioctl(emu, NVEMU_IOC_FREE, &f) ? -errno : 0;
}

static int emu_stats(struct nvemu_stats *s) {
  return ioctl(emu, NVEMU_IOC_STATS, s) ? -errno : 0;
}

static int set_fault(int value) {
  FILE *f = fopen("/sys/module/nvemu/parameters/fault", "w");

  if (!f)
    return -errno;
  fprintf(f, "%d\n", value);
  return fclose(f) ? -errno : 0;
}

/* BAR offset of byte 0 of GPU page i of an allocation. */
static uint64_t gpu_page_bar(const struct nvemu_alloc *a, bool scatter, uint64_t i) {
  uint64_t n = a->length / NVEMU_GPU_PAGE;

  if (scatter && (i ^ 1) < n)
    i ^= 1;
  return a->bar_offset + i * NVEMU_GPU_PAGE;
}

static int t_info(char *detail, size_t len) {
  struct phxfs_info info;
  int fd = phx_open_dev(0);

  EXPECT(fd >= 0 && !phx_get_info(fd, &info), "dev0 info: %s", strerror(errno));
  EXPECT(info.provider == PHXFS_PROVIDER_NVIDIA && info.page_size == 64 * KiB &&
             !(info.flags & PHXFS_INFO_PROVIDER_MISSING),
         "provider %u page %u flags %#x", info.provider, info.page_size, info.flags);
  close(fd);
  snprintf(detail, len, "nvidia provider, 64 KiB pages, flags %#x", info.flags);
  return 0;
}

static int read_into_gpu(bool scatter, uint64_t size, uint64_t disk, char *detail, size_t len) {
  struct nvemu_alloc a;
  struct phxfs_register r;
  unsigned char *map, *ram = ram_alloc(size);
  int fd = phx_open_dev(0), raw = open(raw_path, O_RDONLY | O_DIRECT), ret;
  uint64_t i;

  EXPECT(fd >= 0 && raw >= 0 && ram, "setup");
  ret = emu_alloc(size, scatter ? NVEMU_ALLOC_SCATTER : 0, &a);
  EXPECT(!ret, "cudaMalloc (emulated): %s", strerror(-ret));
  ret = phx_register(fd, a.va, size, &r);
  EXPECT(!ret, "register GPU va %#llx: %s", (unsigned long long)a.va, strerror(-ret));
  EXPECT(r.pin == want_pin, "REGISTER reported pin %llu, want %llu", (unsigned long long)r.pin,
         (unsigned long long)want_pin);
  map = phx_map(fd, &r);
  EXPECT(map, "mmap: %s", strerror(errno));
  EXPECT(!read_exact(raw, map, size, disk), "O_DIRECT read into GPU memory: %s", strerror(errno));
  EXPECT(!read_exact(raw, ram, size, disk), "reference read");
  EXPECT(first_diff(map, ram, size) == size, "GPU bytes differ from RAM at %zu",
         first_diff(map, ram, size));
  for (i = 0; i < size / NVEMU_GPU_PAGE; i++)
    vm_evidence_disk(0, gpu_page_bar(&a, scatter, i), disk + i * NVEMU_GPU_PAGE, NVEMU_GPU_PAGE);
  EXPECT(!munmap(map, size) && !phx_deregister(fd, r.handle), "teardown");
  EXPECT(!emu_free(a.va), "cudaFree");
  close(fd);
  close(raw);
  free(ram);
  snprintf(detail, len, "%llu bytes into %s GPU pages at va %#llx", (unsigned long long)size,
           scatter ? "scattered" : "contiguous", (unsigned long long)a.va);
  return 0;
}

static int t_read_scattered(char *detail, size_t len) {
  return read_into_gpu(true, 1 * MiB, 20 * MiB, detail, len);
}

static int t_read_4m(char *detail, size_t len) {
  return read_into_gpu(false, 4 * MiB, 40 * MiB, detail, len);
}

static int t_write(char *detail, size_t len) {
  const uint64_t size = 2 * MiB;
  struct nvemu_alloc a;
  struct phxfs_register r;
  unsigned char *map, *ram = ram_alloc(size);
  int fd = phx_open_dev(0), raw = open(raw_path, O_RDWR | O_DIRECT), ret;
  uint64_t disk = write_next, i;

  write_next += size;
  EXPECT(fd >= 0 && raw >= 0 && ram && write_next <= disk_size, "setup");
  EXPECT(!(ret = emu_alloc(size, NVEMU_ALLOC_SCATTER, &a)), "alloc: %s", strerror(-ret));
  EXPECT(!(ret = phx_register(fd, a.va, size, &r)), "register: %s", strerror(-ret));
  map = phx_map(fd, &r);
  EXPECT(map, "mmap");
  pattern_fill(map, size, 0x6e76);
  EXPECT(!write_exact(raw, map, size, disk), "O_DIRECT write from GPU memory: %s", strerror(errno));
  EXPECT(!read_exact(raw, ram, size, disk), "read back");
  EXPECT(first_diff(map, ram, size) == size, "disk differs from GPU memory");
  for (i = 0; i < size / NVEMU_GPU_PAGE; i++)
    vm_evidence_disk(0, gpu_page_bar(&a, true, i), disk + i * NVEMU_GPU_PAGE, NVEMU_GPU_PAGE);
  EXPECT(!munmap(map, size) && !phx_deregister(fd, r.handle) && !emu_free(a.va), "teardown");
  close(fd);
  close(raw);
  free(ram);
  snprintf(detail, len, "2 MiB from scattered GPU pages to disk %llu", (unsigned long long)disk);
  return 0;
}

static int t_bad_input(char *detail, size_t len) {
  struct nvemu_alloc a;
  struct nvemu_stats before, after;
  struct phxfs_register r;
  int fd = phx_open_dev(0), ret;

  EXPECT(fd >= 0 && !emu_stats(&before), "setup");
  EXPECT(!emu_alloc(1 * MiB, 0, &a), "alloc");
  EXPECT((ret = phx_register(fd, a.va + 4096, 64 * KiB, &r)) == -EINVAL, "va not 64K aligned: %d",
         ret);
  EXPECT((ret = phx_register(fd, a.va, 4096, &r)) == -EINVAL, "length not 64K multiple: %d", ret);
  EXPECT((ret = phx_register(fd, a.va, 2 * MiB, &r)) == -EINVAL, "past the allocation: %d", ret);
  EXPECT((ret = phx_register(fd, 0x1230000, 64 * KiB, &r)) == -EINVAL, "not device memory: %d",
         ret);
  EXPECT(!emu_free(a.va) && !emu_stats(&after), "free");
  EXPECT(after.pins_live == before.pins_live && after.allocs_live == before.allocs_live,
         "pins %llu->%llu allocs %llu->%llu", (unsigned long long)before.pins_live,
         (unsigned long long)after.pins_live, (unsigned long long)before.allocs_live,
         (unsigned long long)after.allocs_live);
  close(fd);
  snprintf(detail, len, "misaligned, short, overlong and foreign ranges refused, no pin left");
  return 0;
}

static int t_table_checks(char *detail, size_t len) {
  static const int want[] = {0, -EPROTO, -EIO, -EIO, -ENOMEM};
  struct nvemu_alloc a;
  struct nvemu_stats before, after;
  struct phxfs_register r;
  int fd = phx_open_dev(0), f, ret;

  EXPECT(fd >= 0 && !emu_stats(&before), "setup");
  EXPECT(!emu_alloc(256 * KiB, 0, &a), "alloc");
  for (f = 1; f <= 4; f++) {
    EXPECT(!set_fault(f), "set fault");
    ret = phx_register(fd, a.va, 256 * KiB, &r);
    set_fault(0);
    EXPECT(ret == want[f], "fault %d: register returned %d, want %d", f, ret, want[f]);
  }
  EXPECT(!emu_free(a.va) && !emu_stats(&after), "free");
  EXPECT(after.pins_live == before.pins_live, "pins leaked: %llu -> %llu",
         (unsigned long long)before.pins_live, (unsigned long long)after.pins_live);
  close(fd);
  snprintf(detail, len,
           "bad version, page size, out-of-BAR page and ENOMEM refused; pins released");
  return 0;
}

static int t_free_while_pinned(char *detail, size_t len) {
  struct nvemu_alloc a;
  struct nvemu_stats before, mid, after;
  struct phxfs_register r;
  unsigned char *map, *ram = ram_alloc(1 * MiB);
  int fd = phx_open_dev(0), raw = open(raw_path, O_RDONLY | O_DIRECT);

  EXPECT(fd >= 0 && raw >= 0 && ram && !emu_stats(&before), "setup");
  EXPECT(!emu_alloc(1 * MiB, 0, &a) && !phx_register(fd, a.va, 1 * MiB, &r), "alloc+register");
  map = phx_map(fd, &r);
  EXPECT(map, "map");
  EXPECT(!emu_free(a.va) && !emu_stats(&mid), "cudaFree while pinned");
  EXPECT(mid.deferred_frees == before.deferred_frees + 1 && mid.callbacks == before.callbacks,
         "persistent pin: free should be deferred (deferred %llu callbacks %llu)",
         (unsigned long long)mid.deferred_frees, (unsigned long long)mid.callbacks);
  EXPECT(!read_exact(raw, map, 1 * MiB, 7 * MiB) && !read_exact(raw, ram, 1 * MiB, 7 * MiB) &&
             !memcmp(ram, map, 1 * MiB),
         "pinned memory stays usable after cudaFree");
  EXPECT(!munmap(map, 1 * MiB) && !phx_deregister(fd, r.handle) && !emu_stats(&after), "teardown");
  EXPECT(after.pins_live == before.pins_live && after.allocs_live == before.allocs_live,
         "deferred free not completed: pins %llu allocs %llu", (unsigned long long)after.pins_live,
         (unsigned long long)after.allocs_live);
  close(fd);
  close(raw);
  snprintf(detail, len, "persistent pin outlives cudaFree; deregister releases both");
  return 0;
}

static int t_rmmod_provider_while_pinned(char *detail, size_t len) {
  struct nvemu_alloc a;
  struct phxfs_register r;
  int fd = phx_open_dev(0), ret;

  EXPECT(fd >= 0 && !emu_alloc(64 * KiB, 0, &a) && !phx_register(fd, a.va, 64 * KiB, &r), "setup");
  ret = (int)syscall(SYS_delete_module, "nvemu", O_NONBLOCK);
  EXPECT(ret != 0 && (errno == EWOULDBLOCK || errno == EBUSY),
         "rmmod nvemu with a pin: %d errno %d", ret, errno);
  EXPECT(!phx_deregister(fd, r.handle) && !emu_free(a.va), "teardown");
  close(fd);
  snprintf(detail, len, "the NVIDIA driver cannot go while phxfs pins its memory");
  return 0;
}

static int t_exit_with_pins(char *detail, size_t len) {
  struct nvemu_stats before, after;
  struct phxfs_info info;
  int status, fd;
  pid_t pid;

  EXPECT(!emu_stats(&before), "stats");
  pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    struct nvemu_alloc a;
    struct phxfs_register r;
    int e = open("/dev/nvemu", O_RDWR), cfd = phx_open_dev(0);

    emu = e;
    if (e < 0 || cfd < 0 || emu_alloc(1 * MiB, 0, &a) || phx_register(cfd, a.va, 1 * MiB, &r) ||
        !phx_map(cfd, &r))
      _exit(2);
    raise(SIGKILL);
  }
  EXPECT(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status), "child status %#x", status);
  fd = phx_open_dev(0);
  EXPECT(fd >= 0, "open");
  for (int i = 0; i < 300; i++) {
    /* A killed process's teardown may finish in the background. */
    if (!phx_get_info(fd, &info) && info.regs_live == 0)
      break;
    usleep(10000);
  }
  EXPECT(!phx_get_info(fd, &info) && !emu_stats(&after), "info");
  EXPECT(info.regs_live == 0 && after.pins_live == before.pins_live &&
             after.allocs_live == before.allocs_live,
         "after exit: regs %llu pins %llu allocs %llu", (unsigned long long)info.regs_live,
         (unsigned long long)after.pins_live, (unsigned long long)after.allocs_live);
  close(fd);
  snprintf(detail, len, "process killed holding GPU memory and a registration: nothing left");
  return 0;
}

static int t_legacy_callback(char *detail, size_t len) {
  struct nvemu_alloc a;
  struct nvemu_stats before, after;
  struct phxfs_register r;
  struct phxfs_info i0, i1;
  unsigned char *map;
  int fd = phx_open_dev(0), raw = open(raw_path, O_RDONLY | O_DIRECT), sig;
  ssize_t n;

  EXPECT(fd >= 0 && raw >= 0 && !emu_stats(&before) && !phx_get_info(fd, &i0), "setup");
  EXPECT(!emu_alloc(1 * MiB, 0, &a) && !phx_register(fd, a.va, 1 * MiB, &r), "alloc+register");
  map = phx_map(fd, &r);
  EXPECT(map, "map");
  EXPECT(!emu_free(a.va), "cudaFree");
  EXPECT(!emu_stats(&after) && after.callbacks == before.callbacks + 1 &&
             after.pins_live == before.pins_live,
         "callback %llu->%llu pins %llu", (unsigned long long)before.callbacks,
         (unsigned long long)after.callbacks, (unsigned long long)after.pins_live);
  EXPECT(!phx_get_info(fd, &i1) && i1.revocations == i0.revocations + 1 && i1.regs_live == 0 &&
             i1.pages_mapped == 0,
         "revocations %llu live %llu mapped %llu", (unsigned long long)i1.revocations,
         (unsigned long long)i1.regs_live, (unsigned long long)i1.pages_mapped);
  sig = touch_signal(map);
  EXPECT(sig == SIGBUS, "touching freed GPU memory gave signal %d", sig);
  n = pread(raw, map, 64 * KiB, 0);
  EXPECT(n < 0 && errno == EFAULT, "I/O into freed GPU memory: %zd errno %d", n, errno);
  EXPECT(!phx_deregister(fd, r.handle), "deregister after revocation");
  EXPECT(!munmap(map, 1 * MiB), "munmap");
  close(fd);
  close(raw);
  snprintf(detail, len,
           "cudaFree fired the callback: mapping revoked, table freed, handle still valid");
  return 0;
}

static int t_legacy_callback_during_io(char *detail, size_t len) {
  const uint64_t size = 16 * MiB;
  struct nvemu_alloc a;
  struct nvemu_stats before, after;
  struct phxfs_register r;
  struct inflight f;
  pthread_t th;
  int fd = phx_open_dev(0), ret;

  EXPECT(fd >= 0 && !emu_stats(&before), "setup");
  EXPECT(!emu_alloc(size, NVEMU_ALLOC_SCATTER, &a) && !phx_register(fd, a.va, size, &r),
         "alloc+register");
  f = (struct inflight){
      .raw = open(raw_path, O_RDONLY | O_DIRECT), .map = phx_map(fd, &r), .size = size};
  EXPECT(f.raw >= 0 && f.map, "open+map");
  EXPECT(!pthread_create(&th, NULL, inflight_read, &f), "thread");
  usleep(2000);
  ret = emu_free(a.va);
  pthread_join(th, NULL);
  EXPECT(!ret, "cudaFree during I/O: %s", strerror(-ret));
  EXPECT(f.result >= 0 || f.err == EFAULT, "read: %zd errno %d", f.result, f.err);
  EXPECT(!emu_stats(&after) && after.pins_live == before.pins_live &&
             after.callbacks == before.callbacks + 1,
         "pins %llu callbacks %llu", (unsigned long long)after.pins_live,
         (unsigned long long)after.callbacks);
  EXPECT(!phx_deregister(fd, r.handle) && !munmap(f.map, size), "teardown");
  close(fd);
  close(f.raw);
  snprintf(detail, len, "callback waited for the in-flight read (returned %zd)", f.result);
  return 0;
}

static double now_s(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int set_revoke_wait_ms(unsigned int ms) {
  FILE *f = fopen("/sys/module/phxfs/parameters/revoke_wait_ms", "w");

  if (!f)
    return -errno;
  fprintf(f, "%u\n", ms);
  return fclose(f) ? -errno : 0;
}

/*
 * Waits up to 10 s for the device behind @fd to have no live registration
 * (work items finish teardowns in the background), then a little longer:
 * the item that finished the last one may still be returning, and rmmod
 * follows.  @info is the last GET_INFO.  Returns 0, or -1 if it failed.
 */
static int wait_no_regs_live(int fd, struct phxfs_info *info) {
  for (int i = 0; i < 100; i++) {
    if (phx_get_info(fd, info))
      return -1;
    if (!info->regs_live)
      break;
    usleep(100000);
  }
  usleep(100000);
  return 0;
}

struct timed_free {
  uint64_t va;
  int ret;
  double seconds;
  volatile int done;
};

static void *timed_free(void *p) {
  struct timed_free *t = p;
  double start = now_s();

  t->ret = emu_free(t->va);
  t->seconds = now_s() - start;
  t->done = 1;
  return NULL;
}

/*
 * An emulated allocation registered, mapped, filled and held by user space:
 * vmsplice'd into a pipe, or (register_held with @uffd_fallback, on a kernel
 * whose P2PDMA refuses the pipe) pinned by an O_DIRECT read userfaultfd stalls.
 */
struct piped {
  struct nvemu_alloc a;
  struct phxfs_register r;
  unsigned char *map;
  int fds[2];
  bool by_uffd;
  struct uffd_holder u;
};

/*
 * Registers @size bytes of a new allocation through @fd, maps and fills
 * them and vmsplices them into a new pipe, which holds page references for
 * as long as it is open.  Returns 0 then; 1 when this kernel refuses
 * (CONFIG_PCI_P2PDMA: GUP without FOLL_PCI_P2PDMA refuses P2P pages,
 * EREMOTEIO), everything undone; -1 on failure.
 */
static int register_held(int fd, uint64_t size, unsigned char fill, struct piped *p,
                         bool uffd_fallback, char *detail, size_t len) {
  struct iovec iov;
  ssize_t spliced;
  char why[160];
  int got;

  p->by_uffd = false;
  EXPECT(!emu_alloc(size, 0, &p->a) && !phx_register(fd, p->a.va, size, &p->r), "alloc+register");
  p->map = phx_map(fd, &p->r);
  EXPECT(p->map, "map");
  memset(p->map, fill, size);
  EXPECT(!pipe(p->fds), "pipe");
  iov = (struct iovec){p->map, size};
  spliced = vmsplice(p->fds[1], &iov, 1, 0);
  if (spliced < 0 && errno == EREMOTEIO) {
    close(p->fds[0]);
    close(p->fds[1]);
    p->fds[0] = p->fds[1] = -1;
    if (uffd_fallback) {
      got = uffd_holder_start(&p->u, size, fill, why, sizeof(why));
      EXPECT(got >= 0, "uffd holder: %s", why);
      if (!got) {
        got = uffd_holder_hold(&p->u, p->map);
        if (!got) {
          p->by_uffd = true;
          return 0;
        }
        uffd_holder_stop(&p->u);
        EXPECT(got == -EREMOTEIO, "a stalled O_DIRECT read: %s", strerror(-got));
      }
    }
    EXPECT(!munmap(p->map, size) && !phx_deregister(fd, p->r.handle) && !emu_free(p->a.va),
           "teardown");
    return 1;
  }
  EXPECT(spliced == (ssize_t)size, "vmsplice: %s", strerror(errno));
  return 0;
}

static int register_held_by_pipe(int fd, uint64_t size, unsigned char fill, struct piped *p,
                                 char *detail, size_t len) {
  return register_held(fd, size, fill, p, false, detail, len);
}

/*
 * Ends user space's hold on @p: closes the pipe, or lets the stalled read
 * finish (its DMA lands in whatever the pages are now: the test's point
 * where the allocation was freed under a legacy pin).
 */
static const char *holder_name(const struct piped *p) {
  return p->by_uffd ? "a stalled O_DIRECT read" : "a pipe";
}

static void release_hold(struct piped *p) {
  if (p->by_uffd) {
    uffd_holder_stop(&p->u);
    return;
  }
  close(p->fds[0]);
  close(p->fds[1]);
}

/*
 * User space can hold page references for as long as it likes (here a
 * vmsplice'd pipe; io_uring fixed buffers alike).  cudaFree's free callback
 * must not wait for them without bound: it would hang the GPU driver (and
 * a killed process in D state) on user space's whim.
 */
static int t_legacy_free_vs_vmsplice(char *detail, size_t len) {
  const uint64_t size = 64 * KiB;
  struct timed_free t = {0};
  struct nvemu_stats before, after;
  struct phxfs_info info;
  struct piped p;
  double waited;
  int fd = phx_open_dev(0), tuned, held, wedged, sig, i;
  pthread_t th;

  EXPECT(fd >= 0 && !emu_stats(&before), "setup");
  tuned = set_revoke_wait_ms(1000);
  held = register_held_by_pipe(fd, size, 0x7e, &p, detail, len);
  if (held) {
    set_revoke_wait_ms(5000);
    close(fd);
    if (held < 0)
      return -1;
    snprintf(detail, len,
             "vmsplice cannot hold P2PDMA pages on this kernel (EREMOTEIO): "
             "user space has no such hold on the free callback");
    return 1;
  }
  t.va = p.a.va;
  EXPECT(!pthread_create(&th, NULL, timed_free, &t), "thread");
  for (i = 0; i < 300 && !t.done; i++)
    usleep(50000);
  wedged = !t.done;
  waited = (double)i * 0.05;
  close(p.fds[0]);
  close(p.fds[1]);
  pthread_join(th, NULL);
  set_revoke_wait_ms(5000);
  EXPECT(!wedged,
         "cudaFree blocked %.0f s on pages a vmsplice'd pipe held (returned once it closed)",
         waited);
  EXPECT(!tuned, "set revoke_wait_ms: %s", strerror(-tuned));
  EXPECT(!t.ret, "cudaFree: %s", strerror(-t.ret));
  EXPECT(t.seconds >= 0.9 && t.seconds < 5, "cudaFree took %.2f s, want the 1 s bound", t.seconds);
  sig = touch_signal(p.map);
  EXPECT(sig == SIGBUS, "touching freed GPU memory gave signal %d", sig);
  EXPECT(!phx_deregister(fd, p.r.handle) && !munmap(p.map, size), "teardown");
  EXPECT(!wait_no_regs_live(fd, &info), "info");
  EXPECT(!info.regs_live && !info.pages_mapped, "regs_live %llu pages_mapped %llu",
         (unsigned long long)info.regs_live, (unsigned long long)info.pages_mapped);
  EXPECT(!emu_stats(&after) && after.pins_live == before.pins_live &&
             after.callbacks == before.callbacks + 1,
         "pins %llu callbacks %llu", (unsigned long long)after.pins_live,
         (unsigned long long)after.callbacks);
  close(fd);
  snprintf(detail, len,
           "cudaFree returned after %.2f s (revoke_wait_ms 1000) although a pipe held the pages; "
           "mapping revoked, nothing left",
           t.seconds);
  return 0;
}

/*
 * The free callback that finds a teardown under way stops DMA by zapping
 * the registration's range in its mapping, which belongs to the inode of
 * the node the file was opened through.  Here that node is gone, and so is
 * every file on it, before cudaFree: a teardown a pipe holds up outlives
 * both, and the mapping must still be the node's, not freed memory that
 * another file's inode may hold by then.
 */
#define VICTIMS 64

static size_t first_diff_byte(const unsigned char *p, unsigned char want, size_t n) {
  size_t i;

  for (i = 0; i < n && p[i] == want; i++)
    ;
  return i;
}

static int t_legacy_free_after_node_gone(char *detail, size_t len) {
  const uint64_t size = 64 * KiB;
  struct nvemu_stats before, after;
  struct phxfs_info info;
  struct piped p;
  struct stat st;
  unsigned char *victim[VICTIMS];
  char fs[64], node[80];
  cpu_set_t all_cpus;
  off_t off;
  int fd, probe, tuned, held, ret, i, lost = 0, victim_fd[VICTIMS], busy, busy_errno;

  /* The node on a filesystem of its own, to see whether it can be unmounted. */
  snprintf(fs, sizeof(fs), "/tmp/phxfs-nodefs-%d", (int)getpid());
  snprintf(node, sizeof(node), "%s/node", fs);
  EXPECT(!sched_getaffinity(0, sizeof(all_cpus), &all_cpus), "affinity");
  EXPECT(!stat(PHXFS_DEVICE_PREFIX "0", &st) && !emu_stats(&before), "setup");
  EXPECT(!mkdir(fs, 0700) && !mount("tmpfs", fs, "tmpfs", 0, "size=1m"), "mount tmpfs on %s: %s",
         fs, strerror(errno));
  EXPECT(!mknod(node, S_IFCHR | 0600, st.st_rdev), "mknod %s: %s", node, strerror(errno));
  fd = open(node, O_RDWR | O_CLOEXEC);
  unlink(node);
  EXPECT(fd >= 0, "open %s: %s", node, strerror(errno));
  tuned = set_revoke_wait_ms(1000);
  held = register_held_by_pipe(fd, size, 0x5a, &p, detail, len);
  if (held) {
    set_revoke_wait_ms(5000);
    close(fd);
    if (held < 0)
      return -1;
    EXPECT(!umount(fs) && !rmdir(fs), "umount %s: %s", fs, strerror(errno));
    snprintf(detail, len,
             "vmsplice cannot hold P2PDMA pages on this kernel (EREMOTEIO): no teardown "
             "outlives its file here");
    return 1;
  }
  /* The last close: its teardown gives up waiting on the pipe's pages. */
  EXPECT(!munmap(p.map, size), "munmap");
  close(fd);
  /*
   * The teardown under way holds the node's filesystem, as an open file
   * would: an inode it held past the unmount would outlive its superblock.
   */
  busy = umount(fs);
  busy_errno = errno;
  /*
   * The node's inode is freed after an RCU grace period.  Inode slabs keep
   * their constructed state when freed (no poisoning), so a zap through
   * the freed inode's mapping does nothing visible unless the slot holds
   * another inode by then: new files' private copies of the registration's
   * range then lose their writes.
   */
  usleep(300000);
  off = (off_t)p.r.handle * (off_t)getpagesize();
  for (i = 0; i < VICTIMS; i++) {
    cpu_set_t cpus;

    CPU_ZERO(&cpus);
    CPU_SET(i % 2, &cpus);
    sched_setaffinity(0, sizeof(cpus), &cpus);
    victim_fd[i] = open("/tmp", O_TMPFILE | O_RDWR, 0600);
    EXPECT(victim_fd[i] >= 0 && !ftruncate(victim_fd[i], off + (off_t)size), "tmpfile %d: %s", i,
           strerror(errno));
    victim[i] = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE, victim_fd[i], off);
    EXPECT(victim[i] != MAP_FAILED, "mmap tmpfile: %s", strerror(errno));
    memset(victim[i], 0xa5, (size_t)size);
  }
  ret = emu_free(p.a.va);
  sched_setaffinity(0, sizeof(all_cpus), &all_cpus);
  for (i = 0; i < VICTIMS; i++) {
    if (first_diff_byte(victim[i], 0xa5, (size_t)size) != (size_t)size)
      lost++;
    munmap(victim[i], (size_t)size);
    close(victim_fd[i]);
  }
  close(p.fds[0]);
  close(p.fds[1]);
  set_revoke_wait_ms(5000);
  EXPECT(!lost,
         "%d of %d other files' private pages lost their writes to the free callback's zap "
         "(it went through the freed inode's mapping)",
         lost, VICTIMS);
  EXPECT(!tuned, "set revoke_wait_ms: %s", strerror(-tuned));
  EXPECT(!ret, "cudaFree: %s", strerror(-ret));
  probe = phx_open_dev(0);
  EXPECT(probe >= 0, "open dev0");
  EXPECT(!wait_no_regs_live(probe, &info), "info");
  close(probe);
  EXPECT(busy && busy_errno == EBUSY,
         "unmounting the node's filesystem while the teardown held it: %s, want EBUSY",
         busy ? strerror(busy_errno) : "succeeded");
  EXPECT(!umount(fs) && !rmdir(fs), "umount %s once the teardown ended: %s", fs, strerror(errno));
  EXPECT(!info.regs_live && !info.pages_mapped, "regs_live %llu pages_mapped %llu",
         (unsigned long long)info.regs_live, (unsigned long long)info.pages_mapped);
  EXPECT(!emu_stats(&after) && after.pins_live == before.pins_live &&
             after.callbacks == before.callbacks + 1,
         "pins %llu callbacks %llu", (unsigned long long)after.pins_live,
         (unsigned long long)after.callbacks);
  snprintf(detail, len,
           "cudaFree after the node and its last file were gone, a pipe holding the pages: "
           "returned, nothing left; the node's filesystem stayed busy until then");
  return 0;
}

/*
 * The driver calls the free callbacks of one allocation one after the
 * other.  With a page of each of many registrations held by user space,
 * each callback's bounded wait must not add up: revoke_wait_ms bounds the
 * whole cudaFree of this process, not each of its registrations.
 */
#define HELD_REGS 16

static int t_legacy_free_vs_many_held(char *detail, size_t len) {
  const uint64_t each = 64 * KiB;
  struct nvemu_stats before, after;
  struct nvemu_alloc a;
  struct phxfs_register r[HELD_REGS];
  unsigned char *map[HELD_REGS];
  struct phxfs_info info;
  struct iovec iov;
  double start, took;
  int fd = phx_open_dev(0), fds[2], tuned, i;

  EXPECT(fd >= 0 && !emu_stats(&before), "setup");
  EXPECT(!emu_alloc(HELD_REGS * each, 0, &a), "alloc");
  EXPECT(!pipe(fds) && fcntl(fds[1], F_SETPIPE_SZ, (int)(HELD_REGS * each)) >= 0, "pipe: %s",
         strerror(errno));
  for (i = 0; i < HELD_REGS; i++) {
    EXPECT(!phx_register(fd, a.va + i * each, each, &r[i]), "register %d", i);
    map[i] = phx_map(fd, &r[i]);
    EXPECT(map[i], "map %d", i);
    memset(map[i], 0x5d, each);
    iov = (struct iovec){map[i], 4 * KiB};
    if (vmsplice(fds[1], &iov, 1, 0) < 0 && errno == EREMOTEIO) {
      close(fds[0]);
      close(fds[1]);
      close(fd);
      emu_free(a.va);
      snprintf(detail, len,
               "vmsplice cannot hold P2PDMA pages on this kernel (EREMOTEIO): "
               "user space has no such hold on the free callbacks");
      return 1;
    }
  }
  tuned = set_revoke_wait_ms(500);
  start = now_s();
  EXPECT(!emu_free(a.va), "cudaFree");
  took = now_s() - start;
  close(fds[0]);
  close(fds[1]);
  set_revoke_wait_ms(5000);
  EXPECT(!tuned, "set revoke_wait_ms: %s", strerror(-tuned));
  EXPECT(took < 2.5,
         "cudaFree took %.2f s for %d registrations with a held page each: the 0.5 s wait added "
         "up",
         took, HELD_REGS);
  for (i = 0; i < HELD_REGS; i++)
    EXPECT(!phx_deregister(fd, r[i].handle) && !munmap(map[i], each), "teardown %d", i);
  EXPECT(!wait_no_regs_live(fd, &info), "info");
  EXPECT(!info.regs_live, "regs_live %llu", (unsigned long long)info.regs_live);
  EXPECT(!emu_stats(&after) && after.pins_live == before.pins_live &&
             after.callbacks == before.callbacks + HELD_REGS,
         "pins %llu callbacks %llu", (unsigned long long)after.pins_live,
         (unsigned long long)(after.callbacks - before.callbacks));
  close(fd);
  snprintf(detail, len,
           "cudaFree of %d registrations, a page of each held by a pipe, took %.2f s "
           "(revoke_wait_ms 500); nothing left once the pipe closed",
           HELD_REGS, took);
  return 0;
}

/* Until the device's give-up window of an earlier test (revoke_wait_ms 1000 at most) is over. */
static void after_give_up_windows(void) {
  usleep(1200 * 1000);
}

/* Waits up to 10 s for nvemu to hold no more pins than @before did. */
static int wait_pins_back(const struct nvemu_stats *before, struct nvemu_stats *after) {
  for (int i = 0; i < 100; i++) {
    if (emu_stats(after))
      return -1;
    if (after->pins_live == before->pins_live)
      return 0;
    usleep(100000);
  }
  return 0;
}

/*
 * Waits out earlier tests' give-up windows, opens dev0 into *@fd and
 * registers @p, a page held by a pipe (register_held_by_pipe).  Returns 0;
 * 1 on a kernel where vmsplice cannot hold P2PDMA pages (@detail says so,
 * nothing left open); -1 on failure.
 */
static int open_and_hold(int *fd, struct nvemu_stats *before, struct piped *p, unsigned char fill,
                         char *detail, size_t len) {
  int held;

  after_give_up_windows();
  *fd = phx_open_dev(0);
  EXPECT(*fd >= 0 && !emu_stats(before), "setup");
  held = register_held(*fd, 64 * KiB, fill, p, true, detail, len);
  if (held) {
    close(*fd);
    if (held > 0)
      snprintf(detail, len,
               "neither vmsplice nor a stalled O_DIRECT read can hold these pages on this "
               "kernel: user space has no such hold on the free callbacks");
  }
  return held;
}

/*
 * The child of t_legacy_free_turns: its own registrations, each with a page
 * held by a pipe; frees one allocation per byte on @go, answers on @back.
 * Exit status: 0, or where it failed.
 */
#define TURNS 3
static void free_turns_child(int go, int back) {
  const uint64_t size = 64 * KiB;
  struct piped p[TURNS];
  char detail[256], c;
  int fd, i;

  emu = open("/dev/nvemu", O_RDWR);
  fd = phx_open_dev(0);
  if (emu < 0 || fd < 0)
    _exit(10);
  for (i = 0; i < TURNS; i++)
    if (register_held(fd, size, (unsigned char)(0x40 + i), &p[i], true, detail, sizeof(detail)))
      _exit(11);
  if (write(back, "r", 1) != 1)
    _exit(12);
  for (i = 0; i < TURNS; i++) {
    if (read(go, &c, 1) != 1 || emu_free(p[i].a.va) || write(back, "f", 1) != 1)
      _exit(13);
  }
  for (i = 0; i < TURNS; i++) {
    release_hold(&p[i]);
    if (phx_deregister(fd, p[i].r.handle) || munmap(p[i].map, size))
      _exit(14);
  }
  close(fd);
  _exit(0);
}

/*
 * Two processes take turns to free allocations whose pages user space
 * holds.  revoke_wait_ms is the device's budget: once one callback gave up
 * waiting, the next ones wait no more, whichever process frees.  With one
 * give-up slot per process each free waited its whole revoke_wait_ms, one
 * after the other (issue 37, finding 2).
 */
static int t_legacy_free_turns(char *detail, size_t len) {
  const uint64_t size = 64 * KiB;
  struct nvemu_stats before, after;
  struct phxfs_info info;
  struct piped p[TURNS];
  int fd, go[2], back[2], tuned, held, status = -1, i, freed = 0;
  double start, took;
  pid_t child;
  char c;

  held = open_and_hold(&fd, &before, &p[0], 0x3c, detail, len);
  if (held)
    return held;
  for (i = 1; i < TURNS; i++)
    EXPECT(!register_held(fd, size, (unsigned char)(0x3c + i), &p[i], true, detail, len),
           "register %d", i);
  EXPECT(!pipe(go) && !pipe(back), "pipes");
  child = fork();
  EXPECT(child >= 0, "fork: %s", strerror(errno));
  if (!child) {
    close(go[1]);
    close(back[0]);
    free_turns_child(go[0], back[1]);
  }
  close(go[0]);
  close(back[1]);
  tuned = set_revoke_wait_ms(1000);
  start = now_s();
  if (read(back[0], &c, 1) == 1) {
    start = now_s();
    for (i = 0; i < TURNS; i++) {
      if (emu_free(p[i].a.va))
        break;
      freed++;
      if (write(go[1], "g", 1) != 1 || read(back[0], &c, 1) != 1)
        break;
    }
  }
  took = now_s() - start;
  close(go[1]);
  close(back[0]);
  waitpid(child, &status, 0);
  set_revoke_wait_ms(5000);
  for (i = 0; i < TURNS; i++)
    release_hold(&p[i]);
  EXPECT(!tuned, "set revoke_wait_ms: %s", strerror(-tuned));
  EXPECT(WIFEXITED(status) && !WEXITSTATUS(status), "child: status %#x", status);
  EXPECT(freed == TURNS, "cudaFree %d failed", freed);
  for (i = 0; i < TURNS; i++)
    EXPECT(!phx_deregister(fd, p[i].r.handle) && !munmap(p[i].map, size), "teardown %d", i);
  EXPECT(!wait_no_regs_live(fd, &info) && !info.regs_live, "regs_live %llu",
         (unsigned long long)info.regs_live);
  EXPECT(!wait_pins_back(&before, &after) && after.pins_live == before.pins_live &&
             after.callbacks == before.callbacks + 2 * TURNS,
         "pins %llu callbacks %llu", (unsigned long long)after.pins_live,
         (unsigned long long)(after.callbacks - before.callbacks));
  close(fd);
  /* Last, so that a failure leaves nothing behind for the next test. */
  EXPECT(took < 3.0,
         "%d frees taking turns between two processes took %.2f s (revoke_wait_ms 1000): each "
         "waited in full for pages %s held",
         2 * TURNS, took, holder_name(&p[0]));
  snprintf(detail, len,
           "%d cudaFrees taking turns between two processes, a page of each held by %s, "
           "took %.2f s (revoke_wait_ms 1000); nothing left",
           2 * TURNS, holder_name(&p[0]), took);
  return 0;
}

/*
 * Issue 54, item 3: the give-up budget is the user's.  A child whose
 * real uid is 1000 (root's privileges kept, for the holders) registers an
 * allocation whose page user space holds and frees it: its callback waits
 * revoke_wait_ms and gives up, which spends uid 1000's budget.  At once
 * root frees an allocation of its own whose page is held too: its
 * callback must still wait its whole revoke_wait_ms (for DMA in flight to
 * land while the memory is still the tenant's).  With the budget per
 * device it waited for nothing.
 */
#define BUDGET_WAIT_MS 400

static void budget_child(int back) {
  struct piped p;
  char detail[256];
  int fd;

  emu = open("/dev/nvemu", O_RDWR);
  fd = phx_open_dev(0);
  /* REGISTER charges the real uid; euid 0 keeps userfaultfd usable. */
  if (emu < 0 || fd < 0 || setresuid(1000, 0, 0))
    _exit(10);
  if (register_held(fd, 64 * KiB, 0x5e, &p, true, detail, sizeof(detail)))
    _exit(11);
  if (emu_free(p.a.va) || write(back, "f", 1) != 1)
    _exit(12);
  /* Until the parent has freed its own. */
  if (read(back, detail, 1) < 0)
    _exit(13);
  release_hold(&p);
  if (phx_deregister(fd, p.r.handle) || munmap(p.map, 64 * KiB))
    _exit(14);
  close(fd);
  _exit(0);
}

static int t_legacy_budget_per_user(char *detail, size_t len) {
  struct nvemu_stats before, after;
  struct phxfs_info info;
  struct piped p;
  int fd, back[2], tuned, held, status = -1, freed = -1;
  double start, took = 0;
  pid_t child;
  char c;

  held = open_and_hold(&fd, &before, &p, 0x5d, detail, len);
  if (held)
    return held;
  EXPECT(!socketpair(AF_UNIX, SOCK_STREAM, 0, back), "socketpair");
  tuned = set_revoke_wait_ms(BUDGET_WAIT_MS);
  child = fork();
  EXPECT(child >= 0, "fork: %s", strerror(errno));
  if (!child) {
    close(back[0]);
    budget_child(back[1]);
  }
  close(back[1]);
  if (read(back[0], &c, 1) == 1) {
    start = now_s();
    freed = emu_free(p.a.va);
    took = now_s() - start;
  }
  if (write(back[0], "g", 1) != 1)
    kill(child, SIGKILL);
  close(back[0]);
  waitpid(child, &status, 0);
  set_revoke_wait_ms(5000);
  release_hold(&p);
  EXPECT(!tuned, "set revoke_wait_ms: %s", strerror(-tuned));
  EXPECT(WIFEXITED(status) && !WEXITSTATUS(status), "the uid 1000 child: status %#x", status);
  EXPECT(!freed, "cudaFree: %s", strerror(-freed));
  EXPECT(!phx_deregister(fd, p.r.handle) && !munmap(p.map, 64 * KiB), "teardown");
  EXPECT(!wait_no_regs_live(fd, &info) && !info.regs_live, "regs_live %llu",
         (unsigned long long)info.regs_live);
  EXPECT(!wait_pins_back(&before, &after) && after.pins_live == before.pins_live, "pins %llu",
         (unsigned long long)after.pins_live);
  close(fd);
  EXPECT(took >= 0.8 * BUDGET_WAIT_MS / 1e3,
         "root's cudaFree right after uid 1000's callback gave up took %.3f s (revoke_wait_ms "
         "%d): uid 1000 spent root's budget, and DMA in flight was not waited for",
         took, BUDGET_WAIT_MS);
  snprintf(detail, len,
           "uid 1000's callback gave up on a page %s held; root's cudaFree right after waited "
           "%.3f s for its own (revoke_wait_ms %d)",
           holder_name(&p), took, BUDGET_WAIT_MS);
  return 0;
}

/*
 * Issue 54: a tenant whose legacy get_pages is slow (the driver busy, or
 * its thread starved of CPU inside it) holds up its own process alone.  A
 * child with real uid 1000 registers memory whose get_pages sleeps
 * NVEMU_SLOW_PIN_MS.  While it sleeps there, root registers memory of its
 * own and deregisters another registration: both must be over while the
 * child is still inside get_pages.  With one lock for every process's
 * legacy pins they waited for it.
 */
static void slow_pin_child(uint64_t va, int back) {
  struct phxfs_register r;
  int fd = phx_open_dev(0);

  if (fd < 0 || setresuid(1000, 0, 0) || write(back, "r", 1) != 1)
    _exit(10);
  if (phx_register(fd, va, 64 * KiB, &r))
    _exit(11);
  if (phx_deregister(fd, r.handle))
    _exit(12);
  close(fd);
  _exit(0);
}

static int wait_slow_pin(uint64_t want, struct nvemu_stats *s) {
  for (int i = 0; i < 500; i++) {
    if (emu_stats(s))
      return -1;
    if (s->slow_pins_sleeping == want)
      return 0;
    usleep(10000);
  }
  return -1;
}

static int t_legacy_slow_pin_holds_its_process_alone(char *detail, size_t len) {
  struct nvemu_alloc slow, mine, other;
  struct phxfs_register r_mine, r_other;
  struct nvemu_stats s;
  int fd, back[2], status = -1, reg_ret = -1, dereg_ret = -1;
  uint64_t during = 0;
  double start, took = 0;
  pid_t child;
  char c;

  fd = phx_open_dev(0);
  EXPECT(fd >= 0, "open: %s", strerror(errno));
  EXPECT(!emu_alloc(64 * KiB, NVEMU_ALLOC_SLOW_PIN, &slow) && !emu_alloc(64 * KiB, 0, &mine) &&
             !emu_alloc(64 * KiB, 0, &other),
         "alloc");
  EXPECT(!phx_register(fd, other.va, 64 * KiB, &r_other), "register: %s", strerror(errno));
  EXPECT(!socketpair(AF_UNIX, SOCK_STREAM, 0, back), "socketpair");
  child = fork();
  EXPECT(child >= 0, "fork: %s", strerror(errno));
  if (!child) {
    close(back[0]);
    slow_pin_child(slow.va, back[1]);
  }
  close(back[1]);
  if (read(back[0], &c, 1) == 1 && !wait_slow_pin(1, &s)) {
    start = now_s();
    reg_ret = phx_register(fd, mine.va, 64 * KiB, &r_mine);
    dereg_ret = phx_deregister(fd, r_other.handle);
    took = now_s() - start;
    if (!emu_stats(&s))
      during = s.slow_pins_sleeping;
  }
  close(back[0]);
  waitpid(child, &status, 0);
  EXPECT(WIFEXITED(status) && !WEXITSTATUS(status), "the uid 1000 child: status %#x", status);
  EXPECT(!reg_ret && !dereg_ret,
         "root's register %d, deregister %d (or the child's get_pages "
         "never started)",
         reg_ret, dereg_ret);
  EXPECT(!phx_deregister(fd, r_mine.handle), "deregister");
  EXPECT(!emu_free(slow.va) && !emu_free(mine.va) && !emu_free(other.va), "free");
  close(fd);
  EXPECT(during == 1,
         "root's REGISTER and DEREGISTER took %.3f s and ended after uid 1000's get_pages "
         "(%d ms): another process's legacy pin held them up",
         took, NVEMU_SLOW_PIN_MS);
  snprintf(detail, len,
           "root's REGISTER + DEREGISTER took %.3f s while uid 1000's get_pages slept %d ms", took,
           NVEMU_SLOW_PIN_MS);
  return 0;
}

/*
 * The last close gave up waiting for a page a pipe holds and left the
 * teardown to a work item; cudaFree's callback then finds that teardown
 * under way.  The page is known held: the callback must not wait for it a
 * second time (issue 37, finding 2).
 */
static int t_legacy_free_known_held(char *detail, size_t len) {
  const uint64_t size = 64 * KiB;
  struct nvemu_stats before, after;
  struct phxfs_info info;
  struct piped p;
  double start, took;
  int fd, probe, tuned, held, ret;

  held = open_and_hold(&fd, &before, &p, 0x6b, detail, len);
  if (held)
    return held;
  EXPECT(!munmap(p.map, size), "munmap");
  close(fd); /* waits 250 ms for the held page, then leaves it to a work item */
  tuned = set_revoke_wait_ms(1000);
  start = now_s();
  ret = emu_free(p.a.va);
  took = now_s() - start;
  release_hold(&p);
  set_revoke_wait_ms(5000);
  EXPECT(!tuned, "set revoke_wait_ms: %s", strerror(-tuned));
  EXPECT(!ret, "cudaFree: %s", strerror(-ret));
  probe = phx_open_dev(0);
  EXPECT(probe >= 0, "open dev0");
  EXPECT(!wait_no_regs_live(probe, &info) && !info.regs_live, "regs_live %llu",
         (unsigned long long)info.regs_live);
  close(probe);
  EXPECT(!wait_pins_back(&before, &after) && after.pins_live == before.pins_live &&
             after.callbacks == before.callbacks + 1,
         "pins %llu callbacks %llu", (unsigned long long)after.pins_live,
         (unsigned long long)(after.callbacks - before.callbacks));
  EXPECT(took < 0.5,
         "cudaFree took %.2f s (revoke_wait_ms 1000): its callback waited again for a page the "
         "teardown had found held",
         took);
  snprintf(detail, len,
           "cudaFree after the last close left a held page's teardown to a work item: %.2f s, "
           "no second wait; nothing left once %s let go",
           took, holder_name(&p));
  return 0;
}

/*
 * Finding 5 of issue 37: pages a holder keeps after cudaFree stay claimed
 * (quarantined), so nobody can register them.  What bounds that and shows
 * it: the registration stays in the administrator's listing, quarantined,
 * with its owner's pid and uid and its pin, and it counts against its
 * owner's caps until the holder lets go.
 */
static int t_legacy_quarantine_listed_and_charged(char *detail, size_t len) {
  const uint64_t size = 64 * KiB;
  struct nvemu_stats before, after;
  struct phxfs_register extra;
  struct nvemu_alloc other;
  struct phx_listed l;
  struct piped p;
  int fd, tuned, capped, capped_errno, found, gone = -1, i;

  if ((i = open_and_hold(&fd, &before, &p, 0x51, detail, len)))
    return i;
  EXPECT(!emu_alloc(size, 0, &other), "second allocation");
  tuned = set_revoke_wait_ms(200);
  EXPECT(!tuned, "set revoke_wait_ms: %s", strerror(-tuned));
  EXPECT(!emu_free(p.a.va), "cudaFree");
  set_revoke_wait_ms(5000);
  found = phx_find_listed(0, p.r.handle, &l);
  /* One registration per user: the quarantined one must be what uses it up. */
  EXPECT(!phx_set_param("max_regs_per_user", 1), "max_regs_per_user");
  capped = phx_register(fd, other.va, size, &extra);
  capped_errno = errno;
  if (!capped)
    phx_deregister(fd, extra.handle);
  phx_set_param("max_regs_per_user", 65536);
  emu_free(other.va);
  release_hold(&p);
  EXPECT(!phx_deregister(fd, p.r.handle) && !munmap(p.map, size), "teardown");
  for (i = 0; i < 100 && (gone = phx_find_listed(0, p.r.handle, &l)) == 1; i++)
    usleep(100000);
  close(fd);
  EXPECT(found == 1, "handle %llu not in %s after cudaFree (%d)", (unsigned long long)p.r.handle,
         PHX_LISTING, found);
  EXPECT(!strcmp(l.state, "quarantined") && l.pid == getpid() && l.uid == getuid() &&
             l.bytes == size && !strcmp(l.pin, "legacy"),
         "listed as state %s pid %d uid %u bytes %llu pin %s, want quarantined, %d, %u, %llu, "
         "legacy",
         l.state, l.pid, l.uid, l.bytes, l.pin, (int)getpid(), (unsigned)getuid(),
         (unsigned long long)size);
  EXPECT(capped && capped_errno == EDQUOT,
         "max_regs_per_user 1 with only the quarantined registration: REGISTER %s, want EDQUOT",
         capped ? strerror(capped_errno) : "succeeded");
  EXPECT(gone == 0, "still listed 10 s after %s let go (%d)", holder_name(&p), gone);
  EXPECT(!wait_pins_back(&before, &after) && after.pins_live == before.pins_live,
         "pins %llu, were %llu", (unsigned long long)after.pins_live,
         (unsigned long long)before.pins_live);
  snprintf(detail, len,
           "after cudaFree, pages %s keeps: listed quarantined with pid, uid and pin legacy, "
           "counted against the user (EDQUOT at max_regs_per_user 1); gone once it let go",
           holder_name(&p));
  return 0;
}

static long module_refcount(void) {
  FILE *f = fopen("/sys/module/phxfs/refcnt", "r");
  long n = -1;

  if (f) {
    if (fscanf(f, "%ld", &n) != 1)
      n = -1;
    fclose(f);
  }
  return n;
}

/*
 * The driver honours a legacy put_pages only from the process that pinned
 * (it looks the mapping up among that process's): from another it frees
 * nothing, returns 0, and the free callback stays armed with phxfs's
 * registration as its data.  Here the registration's last close is a
 * forked child's.  phxfs must neither put from there nor free what the
 * armed callback names; cudaFree then finds it, and nothing is left.
 */
static int t_legacy_release_outside_owner(char *detail, size_t len) {
  struct nvemu_stats before, parked, after;
  struct nvemu_alloc a;
  struct phxfs_register r;
  struct phxfs_info info;
  long refs = module_refcount(), refs_parked, refs_now = -1;
  int fd = phx_open_dev(0), go[2], status, probe, i;
  pid_t pid;
  char c;

  EXPECT(fd >= 0 && refs >= 0 && !emu_stats(&before), "setup");
  EXPECT(!emu_alloc(1 * MiB, 0, &a) && !phx_register(fd, a.va, 1 * MiB, &r), "alloc+register");
  EXPECT(!pipe(go), "pipe");
  pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    /* Holds the last reference to the file once the parent closed it. */
    close(go[1]);
    if (read(go[0], &c, 1) < 0)
      _exit(2);
    close(fd);
    _exit(0);
  }
  close(go[0]);
  close(fd);
  close(go[1]);
  EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status),
         "child status %#x", status);
  refs_parked = module_refcount();
  probe = phx_open_dev(0);
  EXPECT(probe >= 0, "open");
  EXPECT(!wait_no_regs_live(probe, &info), "info");
  EXPECT(!info.regs_live, "the child's close left %llu registrations live",
         (unsigned long long)info.regs_live);
  EXPECT(!emu_stats(&parked), "stats");
  EXPECT(parked.foreign_puts == before.foreign_puts,
         "phxfs called put_pages from the child, which the driver ignores: the callback stays "
         "armed with a registration phxfs freed");
  EXPECT(parked.pins_live == before.pins_live + 1, "pins live %llu, want %llu (still pinned)",
         (unsigned long long)parked.pins_live, (unsigned long long)before.pins_live + 1);
  EXPECT(refs_parked == refs + 1,
         "module references %ld while parked, %ld before (rmmod must wait)", refs_parked, refs);
  close(probe);
  EXPECT(!emu_free(a.va), "cudaFree");
  EXPECT(!emu_stats(&after), "stats");
  EXPECT(after.callbacks == before.callbacks + 1 && after.pins_live == before.pins_live &&
             after.allocs_live == before.allocs_live,
         "after cudaFree: callbacks %llu pins %llu allocs %llu",
         (unsigned long long)(after.callbacks - before.callbacks),
         (unsigned long long)after.pins_live, (unsigned long long)after.allocs_live);
  /* The callback hands its references to a work item, a second later. */
  for (i = 0; i < 50 && (refs_now = module_refcount()) > refs; i++)
    usleep(100000);
  EXPECT(refs_now == refs, "module references %ld after cudaFree, %ld parked, %ld before", refs_now,
         refs_parked, refs);
  snprintf(detail, len,
           "last close in a forked child: the legacy pin stayed parked (no put_pages from the "
           "child, a module reference held), cudaFree's callback released it, nothing left "
           "%.1f s later",
           i * 0.1);
  return 0;
}

static int t_legacy_deregister(char *detail, size_t len) {
  struct nvemu_stats before, after;
  char inner[256] = "";
  int ret;

  EXPECT(!emu_stats(&before), "stats");
  ret = read_into_gpu(false, 1 * MiB, 60 * MiB, inner, sizeof(inner));
  EXPECT(!ret, "%s", inner);
  EXPECT(!emu_stats(&after) && after.callbacks == before.callbacks &&
             after.legacy_pins == before.legacy_pins + 1 && after.pins_live == before.pins_live,
         "legacy pins %llu callbacks %llu live %llu", (unsigned long long)after.legacy_pins,
         (unsigned long long)after.callbacks, (unsigned long long)after.pins_live);
  snprintf(detail, len, "legacy pin released with put_pages: %s", inner);
  return 0;
}

/*
 * The driver refuses persistent pins (MIG, vGPU): with the default API
 * choice REGISTER fails with EOPNOTSUPP, no legacy pin is taken behind the
 * caller's back, and GET_INFO says so from then on.
 */
/* Reads "GPU memory" at @bar_offset, whoever owns it now (nvemu's peek). */
static int emu_peek(uint64_t bar_offset, void *buf, uint64_t len) {
  struct nvemu_peek p = {.bar_offset = bar_offset, .length = len, .buf = (uintptr_t)buf};

  return ioctl(emu, NVEMU_IOC_PEEK, &p) ? -errno : 0;
}

/*
 * A holder of registered pages that user space controls: it takes page
 * references (hold), writes into the pages whenever it likes (land), and
 * lets them go (release, which for FUSE is the landing itself).
 */
struct holder;

struct holder_ops {
  const char *what;
  /* 0, 1 (skip: this kernel has no such holder), -1; @landing: the bytes land writes. */
  int (*start)(struct holder *h, uint64_t size, unsigned char landing, char *detail, size_t len);
  /* 0 once the pages are held; -errno when the kernel refused to hold them. */
  int (*hold)(struct holder *h, unsigned char *map, uint64_t size);
  int (*land)(struct holder *h);
  void (*release)(struct holder *h);
  void (*stop)(struct holder *h);
};

struct holder {
  struct fuse_holder fuse;
  struct rdma_holder rdma;
  struct uffd_holder uffd;
  /* FUSE: the read that the daemon holds, on a thread. */
  pthread_t reader;
  const char *path;
  unsigned char *map;
  uint64_t size;
  ssize_t result;
  int err;
  volatile int done;
};

static void *fuse_read_thread(void *arg) {
  struct holder *h = arg;
  int fd = open(h->path, O_RDONLY);

  h->result = fd < 0 ? -1 : pread(fd, h->map, h->size, 0);
  h->err = errno;
  if (fd >= 0)
    close(fd);
  h->done = 1;
  return NULL;
}

static int fuse_start(struct holder *h, uint64_t size, unsigned char landing, char *detail,
                      size_t len) {
  int got = fuse_holder_start(&h->fuse, "/tmp/phxfuse", size, landing, detail, len);

  h->path = h->fuse.path;
  return got;
}

static int fuse_hold(struct holder *h, unsigned char *map, uint64_t size) {
  h->map = map;
  h->size = size;
  if (pthread_create(&h->reader, NULL, fuse_read_thread, h))
    return -EAGAIN;
  if (!fuse_holder_wait_read(&h->fuse, 5000))
    return 0;
  /* The read never reached the daemon: refused up front, or it hangs. */
  for (int i = 0; i < 100 && !h->done; i++)
    usleep(50000);
  if (!h->done)
    fuse_holder_stop(&h->fuse);
  pthread_join(h->reader, NULL);
  return -(h->err ? h->err : EIO);
}

/* The daemon answers: FUSE copies the answer into the pages it pinned, then lets them go. */
static int fuse_land(struct holder *h) {
  if (fuse_holder_answer(&h->fuse))
    return -1;
  pthread_join(h->reader, NULL);
  return h->result == (ssize_t)h->size ? 0 : -1;
}

static void fuse_release(struct holder *h) {
  (void)h;
}

static void fuse_stop(struct holder *h) {
  fuse_holder_stop(&h->fuse);
}

static unsigned char rdma_landing;

static int rdma_start(struct holder *h, uint64_t size, unsigned char landing, char *detail,
                      size_t len) {
  rdma_landing = landing;
  return rdma_holder_start(&h->rdma, size, detail, len);
}

static int rdma_hold(struct holder *h, unsigned char *map, uint64_t size) {
  h->size = size;
  return rdma_holder_hold(&h->rdma, map, size);
}

/* A peer's RDMA WRITE into the memory region, whenever it likes. */
static int rdma_land(struct holder *h) {
  return rdma_holder_write(&h->rdma, rdma_landing, h->size);
}

static void rdma_release(struct holder *h) {
  rdma_holder_release(&h->rdma);
}

static void rdma_stop(struct holder *h) {
  rdma_holder_stop(&h->rdma);
}

static int uffd_start(struct holder *h, uint64_t size, unsigned char landing, char *detail,
                      size_t len) {
  return uffd_holder_start(&h->uffd, size, landing, detail, len);
}

static int uffd_hold(struct holder *h, unsigned char *map, uint64_t size) {
  (void)size;
  return uffd_holder_hold(&h->uffd, map);
}

/* User space supplies the missing page: the read goes on into the pinned device pages. */
static int uffd_land(struct holder *h) {
  return uffd_holder_resolve(&h->uffd);
}

static void uffd_release(struct holder *h) {
  (void)h;
}

static void uffd_stop(struct holder *h) {
  uffd_holder_stop(&h->uffd);
}

static bool all_bytes(const unsigned char *p, unsigned char want, size_t n) {
  return first_diff_byte(p, want, n) == n;
}

/*
 * Issue 37, the holder classes user space controls: the holder keeps the
 * pages of a registration that goes away, then writes into them.
 *   P2PDMA kernels  the kernel refuses to hold the pages up front;
 *   persistent      the last close returns after its bounded wait, the
 *                   registration stays held (and pinned), the write lands
 *                   in memory still pinned, and it goes once let go;
 *   legacy          cudaFree returns after revoke_wait_ms, the pages stay
 *                   claimed (quarantined), and the write lands in GPU
 *                   memory the driver has freed: no kernel interface lets
 *                   phxfs take back a page reference another subsystem
 *                   holds, which is why auto refuses legacy pins
 *                   (docs/security.md).  The test proves that it lands.
 */
static int holder_outlives_registration(const struct holder_ops *ops, char *detail, size_t len) {
  const uint64_t size = 64 * KiB;
  const unsigned char landing = 0xc3, mine = 0x11;
  bool legacy = want_pin == PHXFS_PIN_LEGACY;
  struct nvemu_stats before, after;
  struct phxfs_info info;
  struct phxfs_register r;
  struct nvemu_alloc a;
  struct timed_free t = {0};
  unsigned char *peek = ram_alloc(size), *map;
  double closed = 0, start;
  int fd, got, sig = 0, i;
  pthread_t tf;
  struct holder state = {0}, *h = &state;

  got = ops->start(h, size, landing, detail, len);
  if (got)
    return got;
  fd = phx_open_dev(0);
  EXPECT(peek && fd >= 0 && !emu_stats(&before) && !phx_get_info(fd, &info), "setup");
  EXPECT(!emu_alloc(size, 0, &a) && !phx_register(fd, a.va, size, &r), "alloc+register");
  map = phx_map(fd, &r);
  EXPECT(map, "map");
  memset(map, mine, size);
  got = ops->hold(h, map, size);
  if (got) {
    ops->stop(h);
    EXPECT(info.flags & PHXFS_INFO_P2PDMA, "%s could not hold the pages: %s", ops->what,
           strerror(-got));
    EXPECT(all_bytes(map, mine, size), "P2PDMA: the refused holder wrote into the pages");
    EXPECT(!munmap(map, size) && !phx_deregister(fd, r.handle) && !emu_free(a.va), "teardown");
    close(fd);
    free(peek);
    snprintf(detail, len, "P2PDMA pages: %s refused up front (%s)", ops->what, strerror(-got));
    return 0;
  }
  if (legacy) {
    EXPECT(!set_revoke_wait_ms(1000), "revoke_wait_ms");
    /* A callback that gave up earlier (a test before) spends the device's wait for 1 s. */
    usleep(1200000);
    t.va = a.va;
    EXPECT(!pthread_create(&tf, NULL, timed_free, &t), "thread");
    for (i = 0; i < 200 && !t.done; i++)
      usleep(50000);
    if (t.done)
      sig = touch_signal(map);
  } else {
    /* The last close: a bounded wait, then the registration is held. */
    EXPECT(!munmap(map, size), "munmap");
    start = now_s();
    close(fd);
    closed = now_s() - start;
    fd = phx_open_dev(0);
    EXPECT(fd >= 0 && !phx_get_info(fd, &info), "info");
  }
  got = emu_peek(a.bar_offset, peek, size);
  EXPECT(!got && all_bytes(peek, mine, size), "GPU memory changed before the write (%d)", got);
  got = ops->land(h);
  if (legacy) {
    pthread_join(tf, NULL);
    set_revoke_wait_ms(5000);
  }
  EXPECT(!got, "%s: the write into the held pages failed", ops->what);
  got = emu_peek(a.bar_offset, peek, size);
  EXPECT(!got && all_bytes(peek, landing, size), "the holder's bytes are not in GPU memory (%d)",
         got);
  ops->release(h);
  ops->stop(h);
  if (legacy) {
    EXPECT(!t.ret, "cudaFree: %s", strerror(-t.ret));
    EXPECT(t.seconds >= 0.9 && t.seconds < 5, "cudaFree took %.2f s, want the 1 s bound",
           t.seconds);
    EXPECT(sig == SIGBUS, "touching freed GPU memory gave signal %d", sig);
    EXPECT(!phx_deregister(fd, r.handle) && !munmap(map, size), "teardown");
  } else {
    EXPECT(closed < 2, "the last close took %.2f s", closed);
    EXPECT(info.regs_live == 1, "regs_live %llu while %s held the pages",
           (unsigned long long)info.regs_live, ops->what);
  }
  EXPECT(!wait_no_regs_live(fd, &info) && !info.regs_live, "regs_live %llu once let go",
         (unsigned long long)info.regs_live);
  if (!legacy)
    EXPECT(!emu_free(a.va), "cudaFree");
  EXPECT(!emu_stats(&after) && after.pins_live == before.pins_live &&
             after.callbacks == before.callbacks + (legacy ? 1 : 0),
         "pins %llu callbacks %llu", (unsigned long long)after.pins_live,
         (unsigned long long)after.callbacks);
  close(fd);
  free(peek);
  if (legacy)
    snprintf(detail, len,
             "cudaFree returned after %.2f s while %s held the pages; its write then landed in "
             "the freed GPU memory (legacy pins cannot prevent it); the pages stayed claimed "
             "until let go, nothing left after",
             t.seconds, ops->what);
  else
    snprintf(detail, len,
             "the last close returned after %.2f s while %s held the pages; the registration "
             "stayed held and pinned, the write landed in it, and it went once let go",
             closed, ops->what);
  return 0;
}

static const struct holder_ops fuse_read_holder = {
    .what = "a FUSE daemon's held O_DIRECT read",
    .start = fuse_start,
    .hold = fuse_hold,
    .land = fuse_land,
    .release = fuse_release,
    .stop = fuse_stop,
};

static const struct holder_ops rdma_region_holder = {
    .what = "an RDMA memory region (Soft-RoCE)",
    .start = rdma_start,
    .hold = rdma_hold,
    .land = rdma_land,
    .release = rdma_release,
    .stop = rdma_stop,
};

static const struct holder_ops uffd_read_holder = {
    .what = "an O_DIRECT read that userfaultfd stalls",
    .start = uffd_start,
    .hold = uffd_hold,
    .land = uffd_land,
    .release = uffd_release,
    .stop = uffd_stop,
};

static int t_fuse_holder(char *detail, size_t len) {
  return holder_outlives_registration(&fuse_read_holder, detail, len);
}

static int t_rdma_holder(char *detail, size_t len) {
  return holder_outlives_registration(&rdma_region_holder, detail, len);
}

static int t_uffd_holder(char *detail, size_t len) {
  return holder_outlives_registration(&uffd_read_holder, detail, len);
}

static int t_refused(char *detail, size_t len) {
  struct nvemu_stats before, after;
  struct phxfs_info info;
  struct phxfs_register r;
  struct nvemu_alloc a;
  int fd = phx_open_dev(0), ret;

  EXPECT(fd >= 0 && !phx_get_info(fd, &info), "info");
  EXPECT(info.features & PHXFS_FEATURE_PIN_REPORTED, "features %#llx",
         (unsigned long long)info.features);
  EXPECT(!emu_stats(&before), "stats");
  ret = emu_alloc(1 * MiB, 0, &a);
  EXPECT(!ret, "cudaMalloc (emulated): %s", strerror(-ret));
  ret = phx_register(fd, a.va, 1 * MiB, &r);
  EXPECT(ret == -EOPNOTSUPP, "register with persistent pins refused: %d, want EOPNOTSUPP", ret);
  /*
   * At most one legacy pin, of the first 64 KiB, taken and put back at
   * once to see that the memory is this device's; none kept.
   */
  EXPECT(!emu_stats(&after) && after.legacy_pins <= before.legacy_pins + 1 &&
             after.pins_live == before.pins_live,
         "a pin was taken anyway: legacy %llu -> %llu, live %llu -> %llu",
         (unsigned long long)before.legacy_pins, (unsigned long long)after.legacy_pins,
         (unsigned long long)before.pins_live, (unsigned long long)after.pins_live);
  EXPECT(!phx_get_info(fd, &info), "info after");
  EXPECT((info.flags & PHXFS_INFO_PIN_REFUSED) && !(info.flags & PHXFS_INFO_PERSISTENT) &&
             !(info.flags & PHXFS_INFO_PROVIDER_MISSING),
         "flags %#x: PIN_REFUSED expected", info.flags);
  EXPECT(!emu_free(a.va), "cudaFree");
  close(fd);
  snprintf(detail, len,
           "persistent pins refused by the driver: REGISTER EOPNOTSUPP, no legacy pin kept, "
           "GET_INFO flags %#x",
           info.flags);
  return 0;
}

/*
 * Issue 54, item 5: memory of another GPU, whose driver refuses persistent
 * pins (MIG), registered through this device: REGISTER fails with
 * EOPNOTSUPP, and that must not make GET_INFO report PIN_REFUSED for this
 * healthy device, which libphoenix reads as "no direct I/O here" for
 * every user; this device's memory still registers with a persistent pin.
 */
static int t_refused_other_gpu(char *detail, size_t len) {
  struct nvemu_stats before, after;
  struct phxfs_info info;
  struct phxfs_register r;
  struct nvemu_alloc other, mine;
  int fd = phx_open_dev(0), ret, mine_ret;

  EXPECT(fd >= 0 && !emu_stats(&before), "open, stats");
  ret = emu_alloc(1 * MiB, NVEMU_ALLOC_OTHER_GPU, &other);
  EXPECT(!ret, "cudaMalloc on the other GPU (emulated): %s", strerror(-ret));
  ret = phx_register(fd, other.va, 1 * MiB, &r);
  EXPECT(!phx_get_info(fd, &info), "info after");
  EXPECT(!emu_alloc(1 * MiB, 0, &mine), "cudaMalloc");
  mine_ret = phx_register(fd, mine.va, 1 * MiB, &r);
  if (!mine_ret)
    phx_deregister(fd, r.handle);
  emu_free(mine.va);
  emu_free(other.va);
  EXPECT(!emu_stats(&after) && after.pins_live == before.pins_live, "pins live %llu -> %llu",
         (unsigned long long)before.pins_live, (unsigned long long)after.pins_live);
  close(fd);
  EXPECT(ret == -EOPNOTSUPP, "register of the other GPU's memory: %d, want EOPNOTSUPP", ret);
  EXPECT(!(info.flags & PHXFS_INFO_PIN_REFUSED) && (info.flags & PHXFS_INFO_PERSISTENT),
         "after a refusal of another GPU's memory GET_INFO flags are %#x: PIN_REFUSED turns "
         "direct I/O off for every user of this device",
         info.flags);
  EXPECT(!mine_ret && r.pin == PHXFS_PIN_PERSISTENT, "this device's memory then: %s, pin %u",
         strerror(-mine_ret), (unsigned)r.pin);
  snprintf(detail, len,
           "another GPU's memory (persistent pins refused): REGISTER EOPNOTSUPP, GET_INFO flags "
           "%#x (no PIN_REFUSED), this device's memory still pinned persistently",
           info.flags);
  return 0;
}

static int t_missing(char *detail, size_t len) {
  struct phxfs_info info;
  struct phxfs_register r;
  int fd = phx_open_dev(0), ret;

  EXPECT(fd >= 0 && !phx_get_info(fd, &info), "info");
  EXPECT(info.provider == PHXFS_PROVIDER_NVIDIA && (info.flags & PHXFS_INFO_PROVIDER_MISSING),
         "flags %#x: PROVIDER_MISSING expected without the NVIDIA driver", info.flags);
  ret = phx_register(fd, NVEMU_VA_BASE, 64 * KiB, &r);
  EXPECT(ret == -ENODEV, "register without the driver: %d, want ENODEV", ret);
  close(fd);
  snprintf(detail, len, "phxfs loaded first: GET_INFO says the driver is missing, REGISTER ENODEV");
  return 0;
}

int vmtest_nvidia(const char *mode) {
  int raw;

  raw_path = getenv("PHX_RAW_DEV");
  raw = raw_path ? open(raw_path, O_RDONLY) : -1;
  if (raw < 0 || ioctl(raw, BLKGETSIZE64, &disk_size)) {
    vm_result("nvidia/setup", -1, "PHX_RAW_DEV missing");
    return 1;
  }
  close(raw);
  write_next = disk_size / 8 * 7 + (strcmp(mode, "legacy") ? 0 : 8 * MiB);

  if (!strcmp(mode, "missing")) {
    vm_run("nvidia/load_order_missing", t_missing);
    return vm_failures() ? 1 : 0;
  }
  emu = open("/dev/nvemu", O_RDWR);
  if (emu < 0) {
    vm_result("nvidia/setup", -1, "/dev/nvemu missing");
    return 1;
  }
  if (!strcmp(mode, "appeared")) {
    vm_run("nvidia/load_order_appeared_info", t_info);
    vm_run("nvidia/load_order_appeared_read", t_read_scattered);
  } else if (!strcmp(mode, "refused")) {
    vm_run("nvidia/refused_no_silent_legacy", t_refused);
  } else if (!strcmp(mode, "refused_legacy")) {
    want_pin = PHXFS_PIN_LEGACY;
    vm_run("nvidia/refused_legacy_opted_in", t_legacy_deregister);
  } else if (!strcmp(mode, "legacy")) {
    want_pin = PHXFS_PIN_LEGACY;
    vm_run("nvidia/legacy_deregister", t_legacy_deregister);
    vm_run("nvidia/legacy_free_callback", t_legacy_callback);
    vm_run("nvidia/legacy_free_callback_during_io", t_legacy_callback_during_io);
    vm_run("nvidia/legacy_free_vs_vmsplice", t_legacy_free_vs_vmsplice);
    vm_run("nvidia/legacy_free_after_node_gone", t_legacy_free_after_node_gone);
    vm_run("nvidia/legacy_release_outside_owner", t_legacy_release_outside_owner);
    vm_run("nvidia/legacy_free_vs_many_held", t_legacy_free_vs_many_held);
    vm_run("nvidia/legacy_free_turns_between_processes", t_legacy_free_turns);
    vm_run("nvidia/legacy_budget_per_user", t_legacy_budget_per_user);
    vm_run("nvidia/legacy_slow_pin_holds_its_process_alone",
           t_legacy_slow_pin_holds_its_process_alone);
    vm_run("nvidia/legacy_free_known_held", t_legacy_free_known_held);
    vm_run("nvidia/legacy_quarantine_listed_and_charged", t_legacy_quarantine_listed_and_charged);
    vm_run("nvidia/legacy_free_vs_fuse_read", t_fuse_holder);
    vm_run("nvidia/legacy_free_vs_rdma_region", t_rdma_holder);
    vm_run("nvidia/legacy_free_vs_uffd_stalled_read", t_uffd_holder);
  } else {
    vm_run("nvidia/info", t_info);
    vm_run("nvidia/read_scattered_pages", t_read_scattered);
    vm_run("nvidia/read_4m", t_read_4m);
    vm_run("nvidia/write", t_write);
    vm_run("nvidia/bad_input", t_bad_input);
    vm_run("nvidia/page_table_checks", t_table_checks);
    vm_run("nvidia/refused_other_gpu_not_device_wide", t_refused_other_gpu);
    vm_run("nvidia/persistent_free_while_pinned", t_free_while_pinned);
    vm_run("nvidia/rmmod_provider_while_pinned", t_rmmod_provider_while_pinned);
    vm_run("nvidia/exit_with_pins", t_exit_with_pins);
    vm_run("nvidia/close_vs_fuse_read", t_fuse_holder);
    vm_run("nvidia/close_vs_rdma_region", t_rdma_holder);
    vm_run("nvidia/close_vs_uffd_stalled_read", t_uffd_holder);
  }
  close(emu);
  return vm_failures() ? 1 : 0;
}
