// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_pcibar.c - the guest suite on phxfs's PCI BAR provider: every
 * transfer goes NVMe <-> BAR through the kernel's own O_DIRECT and io_uring
 * paths on the address phxfs mapped, and is checked byte for byte against
 * the same range read into RAM.  Ranges that stay untouched afterwards are
 * reported as evidence, which the host compares with its shm files and disk
 * image after the VM exits.
 *
 * Layout: BAR bytes [0, 120 MiB) of each device belong to this group (the
 * many-devices group's evidence lies at 120 MiB, the cuFile client's in
 * device 0's [121, 128) MiB, and the NVIDIA group's emulation uses the
 * upper half of device 0).  The raw disk's first half is only read; writes
 * go to [1/2, 7/8) of it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fs.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vmtest.h"
#include "vmtest_pcibar.h"

#define GROUP_BAR_BYTES (120 * MiB)
#define RIG_BAR_BYTES (256 * MiB) /* ivshmem #0 and #1 */

static const char *raw_path;
static const char *ext4_dir;
static uint64_t disk_size;
static uint64_t bar_next[2];
static uint64_t write_next;
static uint64_t seed = 1;
/* pcibar/threads registers from four threads: two equal offsets would collide (EBUSY). */
static pthread_mutex_t bar_lock = PTHREAD_MUTEX_INITIALIZER;

static int bar_alloc(int dev, uint64_t len, uint64_t *off) {
  int ret = 0;

  pthread_mutex_lock(&bar_lock);
  if (bar_next[dev] + len > GROUP_BAR_BYTES) {
    ret = -ENOSPC;
  } else {
    *off = bar_next[dev];
    bar_next[dev] += (len + 4095) & ~4095ULL;
  }
  pthread_mutex_unlock(&bar_lock);
  return ret;
}

static int disk_write_alloc(uint64_t len, uint64_t *off) {
  if (write_next + len > disk_size / 8 * 7)
    return -ENOSPC;
  *off = write_next;
  write_next += (len + 4095) & ~4095ULL;
  return 0;
}

struct region {
  int fd;
  int dev;
  uint64_t bar_off;
  struct phxfs_register reg;
  unsigned char *map;
};

static int region_open(struct region *r, int dev, uint64_t len) {
  int ret;

  memset(r, 0, sizeof(*r));
  r->dev = dev;
  r->fd = phx_open_dev((unsigned int)dev);
  if (r->fd < 0)
    return -errno;
  ret = bar_alloc(dev, len, &r->bar_off);
  if (!ret)
    ret = phx_register(r->fd, r->bar_off, len, &r->reg);
  if (!ret) {
    r->map = phx_map(r->fd, &r->reg);
    if (!r->map)
      ret = -errno;
  }
  if (ret) {
    close(r->fd);
    r->fd = -1;
  }
  return ret;
}

/*
 * A DEREGISTER in another process that shares our mm (spawn_same_mm), so
 * that it can block, be killed or be waited for while we go on.
 */
struct region_ref {
  int fd;
  uint64_t handle;
  int close_fds[2]; /* the child's copies of these would hold a pipe open; -1: none */
};

static int deregister_child(void *p) {
  const struct region_ref *d = p;

  if (d->close_fds[0] >= 0)
    close(d->close_fds[0]);
  if (d->close_fds[1] >= 0)
    close(d->close_fds[1]);
  return phx_deregister(d->fd, d->handle) ? 1 : 0;
}

static int region_close(struct region *r) {
  int ret = 0;

  if (r->map && munmap(r->map, r->reg.length))
    ret = -errno;
  if (!ret)
    ret = phx_deregister(r->fd, r->reg.handle);
  close(r->fd);
  return ret;
}

/* Teardown after a kill may finish in the background: poll briefly. */
static int wait_regs_idle(int dev, struct phxfs_info *info) {
  int fd = phx_open_dev((unsigned int)dev), i;

  if (fd < 0)
    return -errno;
  for (i = 0; i < 300; i++) {
    if (phx_get_info(fd, info) == 0 && info->regs_live == 0 && info->pages_mapped == 0)
      break;
    usleep(10000);
  }
  close(fd);
  return 0;
}

static uint64_t round_up_4k(uint64_t v) {
  return (v + 4095) & ~4095ULL;
}

/* Bytes of one request above the controller's limit, so the block layer splits it. */
static uint64_t past_max_hw(void) {
  const char *base = strrchr(raw_path, '/');
  char path[128];
  unsigned long kb = 0;
  FILE *f;

  snprintf(path, sizeof(path), "/sys/block/%s/queue/max_hw_sectors_kb", base ? base + 1 : raw_path);
  f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%lu", &kb) != 1)
      kb = 0;
    fclose(f);
  }
  if (!kb)
    kb = 512;
  return round_up_4k(kb * KiB * 2 + 12 * KiB);
}

/* One direct read into device 0 and one direct write from device 1. */
static int rw_size(uint64_t size, char *detail, size_t len) {
  struct region rd, wr;
  unsigned char *ram = ram_alloc(size), *pat = ram_alloc(size);
  uint64_t disk_rd = (seed * 7919 * MiB) % (disk_size / 2 - size) & ~4095ULL;
  uint64_t disk_wr;
  int raw, ret;
  size_t d;

  seed++;
  EXPECT(ram && pat, "out of memory");
  raw = open(raw_path, O_RDWR | O_DIRECT);
  EXPECT(raw >= 0, "open %s: %s", raw_path, strerror(errno));

  ret = region_open(&rd, 0, size);
  EXPECT(!ret, "register+map %llu bytes on dev0: %s", (unsigned long long)size, strerror(-ret));
  ret = read_exact(raw, rd.map, size, disk_rd);
  EXPECT(!ret, "O_DIRECT pread into device memory: %s", strerror(-ret));
  ret = read_exact(raw, ram, size, disk_rd);
  EXPECT(!ret, "O_DIRECT pread into RAM: %s", strerror(-ret));
  d = first_diff(rd.map, ram, size);
  EXPECT(d == size, "read %llu at disk %llu: device bytes differ from RAM at %zu",
         (unsigned long long)size, (unsigned long long)disk_rd, d);
  vm_evidence_disk(0, rd.bar_off, disk_rd, size);

  ret = disk_write_alloc(size, &disk_wr);
  EXPECT(!ret, "disk write area exhausted");
  ret = region_open(&wr, 1, size);
  EXPECT(!ret, "register+map %llu bytes on dev1: %s", (unsigned long long)size, strerror(-ret));
  pattern_fill(pat, size, seed * 31);
  memcpy(wr.map, pat, size);
  ret = write_exact(raw, wr.map, size, disk_wr);
  EXPECT(!ret, "O_DIRECT pwrite from device memory: %s", strerror(-ret));
  ret = read_exact(raw, ram, size, disk_wr);
  EXPECT(!ret, "read back: %s", strerror(-ret));
  d = first_diff(pat, ram, size);
  EXPECT(d == size, "write %llu: disk differs from the pattern at %zu", (unsigned long long)size,
         d);
  vm_evidence_disk(1, wr.bar_off, disk_wr, size);

  EXPECT(!region_close(&rd) && !region_close(&wr), "deregister: %s", strerror(errno));
  close(raw);
  free(ram);
  free(pat);
  snprintf(detail, len, "%llu bytes read at %llu, written at %llu", (unsigned long long)size,
           (unsigned long long)disk_rd, (unsigned long long)disk_wr);
  return 0;
}

#define SIZE_TEST(name, bytes)                \
  static int name(char *detail, size_t len) { \
    return rw_size(bytes, detail, len);       \
  }
SIZE_TEST(t_rw_4k, 4 * KiB)
SIZE_TEST(t_rw_8k, 8 * KiB)
SIZE_TEST(t_rw_12k, 12 * KiB)
SIZE_TEST(t_rw_64k, 64 * KiB)
SIZE_TEST(t_rw_68k, 68 * KiB)
SIZE_TEST(t_rw_1m, 1 * MiB)
SIZE_TEST(t_rw_64m, 64 * MiB)

static int t_rw_past_max_hw(char *detail, size_t len) {
  return rw_size(past_max_hw(), detail, len);
}

static int t_info(char *detail, size_t len) {
  struct phxfs_info info;
  int dev;

  for (dev = 0; dev < 2; dev++) {
    int fd = phx_open_dev((unsigned int)dev), ret;

    EXPECT(fd >= 0, "open dev%d: %s", dev, strerror(errno));
    ret = phx_get_info(fd, &info);
    EXPECT(!ret, "GET_INFO: %s", strerror(-ret));
    EXPECT(info.abi_version == PHXFS_ABI_VERSION && info.device_index == (unsigned)dev &&
               info.provider == PHXFS_PROVIDER_PCIBAR && info.page_size == 4096 &&
               info.bar_size >= RIG_BAR_BYTES && info.regs_live == 0 && info.pages_mapped == 0,
           "dev%d: abi %u index %u provider %u page %u bar %llu live %llu mapped %llu", dev,
           info.abi_version, info.device_index, info.provider, info.page_size,
           (unsigned long long)info.bar_size, (unsigned long long)info.regs_live,
           (unsigned long long)info.pages_mapped);
    close(fd);
  }
  snprintf(detail, len, "2 devices, pcibar, %llu MiB BAR", (unsigned long long)info.bar_size >> 20);
  return 0;
}

static int expect_register(int fd, uint64_t addr, uint64_t length, int want) {
  struct phxfs_register r;
  int ret = phx_register(fd, addr, length, &r);

  if (ret == 0)
    phx_deregister(fd, r.handle);
  return ret == want ? 0 : (ret ? ret : 1);
}

static int t_bad_input(char *detail, size_t len) {
  struct phxfs_info info;
  struct phxfs_register r;
  struct phxfs_deregister dr;
  uint64_t scratch, errors_before;
  void *p;
  int fd, ret;

  fd = phx_open_dev(0);
  EXPECT(fd >= 0, "open: %s", strerror(errno));
  EXPECT(!phx_get_info(fd, &info), "GET_INFO");
  errors_before = info.errors;
  EXPECT(!bar_alloc(0, 64 * KiB, &scratch), "BAR space");

  memset(&info, 0, sizeof(info));
  info.abi_version = 0; /* a newer one is answered: pcibar/info_newer_abi */
  info.argsz = sizeof(info);
  EXPECT(ioctl(fd, PHXFS_IOC_GET_INFO, &info) && errno == EPROTO, "wrong ABI: errno %d", errno);
  info.abi_version = PHXFS_ABI_VERSION;
  info.argsz = sizeof(info) - 8;
  EXPECT(ioctl(fd, PHXFS_IOC_GET_INFO, &info) && errno == EINVAL, "short argsz: errno %d", errno);

  memset(&r, 0, sizeof(r));
  r.abi_version = PHXFS_ABI_VERSION;
  r.argsz = sizeof(r);
  r.device_addr = scratch;
  r.length = 4096;
  r.reserved = 1;
  EXPECT(ioctl(fd, PHXFS_IOC_REGISTER, &r) && errno == EINVAL, "reserved: errno %d", errno);
  r.reserved = 0;
  /* pin is an output: what a caller leaves in it is ignored. */
  r.pin = 0x5a5a;
  EXPECT(!ioctl(fd, PHXFS_IOC_REGISTER, &r) && r.pin == PHXFS_PIN_BAR,
         "pin left set on input: errno %d, pin %llu", errno, (unsigned long long)r.pin);
  if (r.handle) {
    struct phxfs_deregister d = {
        .abi_version = PHXFS_ABI_VERSION, .argsz = sizeof(d), .handle = r.handle};
    EXPECT(!ioctl(fd, PHXFS_IOC_DEREGISTER, &d), "deregister: errno %d", errno);
  }
  memset(&r, 0, sizeof(r));
  r.abi_version = PHXFS_ABI_VERSION;
  r.argsz = sizeof(r);
  r.device_addr = scratch;
  r.length = 4096;
  r.pad = 1;
  EXPECT(ioctl(fd, PHXFS_IOC_REGISTER, &r) && errno == EINVAL, "pad: errno %d", errno);
  r.pad = 0;
  r.flags = 4;
  EXPECT(ioctl(fd, PHXFS_IOC_REGISTER, &r) && errno == EINVAL, "flags: errno %d", errno);
  r.flags = 0;
  r.abi_version = 0;
  EXPECT(ioctl(fd, PHXFS_IOC_REGISTER, &r) && errno == EPROTO, "abi 0: errno %d", errno);

  EXPECT(!(ret = expect_register(fd, scratch, 0, -EINVAL)), "zero length: %d", ret);
  EXPECT(!(ret = expect_register(fd, scratch + 512, 4096, -EINVAL)), "misaligned address: %d", ret);
  EXPECT(!(ret = expect_register(fd, scratch, 4097, -EINVAL)), "misaligned length: %d", ret);
  EXPECT(!(ret = expect_register(fd, ~0ULL - 4095, 8192, -EOVERFLOW)), "wrap: %d", ret);
  EXPECT(!(ret = expect_register(fd, 0, ~0ULL & ~4095ULL, -ERANGE)) || ret == -EOVERFLOW,
         "huge length: %d", ret);
  EXPECT(!(ret = expect_register(fd, RIG_BAR_BYTES - 4096, 8192, -ERANGE)), "past BAR end: %d",
         ret);
  EXPECT(!(ret = expect_register(fd, 1ULL << 40, 4096, -ERANGE)), "far past BAR: %d", ret);
  EXPECT(!(ret = expect_register(fd, 0, 1ULL << 40, -ERANGE)), "longer than the BAR: %d", ret);

  EXPECT(!phx_register(fd, scratch, 64 * KiB, &r), "register scratch");
  EXPECT(!(ret = expect_register(fd, scratch + 4096, 4096, -EBUSY)), "overlap: %d", ret);
  EXPECT(!(ret = expect_register(fd, scratch, 64 * KiB, -EBUSY)), "same range twice: %d", ret);

  p = mmap(NULL, r.length - 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)r.mmap_offset);
  EXPECT(p == MAP_FAILED && errno == EINVAL, "short mmap: errno %d", errno);
  p = mmap(NULL, r.length, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)r.mmap_offset);
  EXPECT(p == MAP_FAILED && errno == EINVAL, "MAP_PRIVATE: errno %d", errno);
  p = mmap(NULL, r.length, PROT_READ | PROT_EXEC, MAP_SHARED, fd, (off_t)r.mmap_offset);
  EXPECT(p == MAP_FAILED && errno == EPERM, "PROT_EXEC: errno %d", errno);
  p = mmap(NULL, r.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
           (off_t)(r.mmap_offset + (1ULL << 40)));
  EXPECT(p == MAP_FAILED && errno == EINVAL, "unknown offset: errno %d", errno);
  p = phx_map(fd, &r);
  EXPECT(p, "mmap: %s", strerror(errno));
  EXPECT(mmap(NULL, r.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)r.mmap_offset) ==
                 MAP_FAILED &&
             errno == EBUSY,
         "map twice: errno %d", errno);
  EXPECT(munmap((char *)p + 4096, 4096) && errno == EINVAL, "partial munmap: errno %d", errno);
  EXPECT(mprotect(p, 4096, PROT_READ) && errno == EINVAL, "mprotect splitting: errno %d", errno);
  EXPECT(!munmap(p, r.length), "munmap: %s", strerror(errno));
  EXPECT(munmap(p, r.length) == 0, "second munmap of a hole must succeed as a no-op");

  EXPECT(!phx_deregister(fd, r.handle), "deregister");
  EXPECT(phx_deregister(fd, r.handle) == -ENOENT, "deregister twice");
  EXPECT(phx_deregister(fd, 12345678) == -ENOENT, "unknown handle");
  memset(&dr, 0, sizeof(dr));
  dr.abi_version = PHXFS_ABI_VERSION;
  dr.argsz = sizeof(dr);
  dr.reserved[0] = 7;
  EXPECT(ioctl(fd, PHXFS_IOC_DEREGISTER, &dr) && errno == EINVAL, "dereg reserved: errno %d",
         errno);
  EXPECT(ioctl(fd, _IOWR(PHXFS_IOC_MAGIC, 0x7f, struct phxfs_info), &info) && errno == ENOTTY,
         "unknown ioctl: errno %d", errno);
  EXPECT(ioctl(fd, PHXFS_IOC_GET_INFO, (void *)16) && errno == EFAULT, "bad pointer: errno %d",
         errno);

  EXPECT(!phx_get_info(fd, &info), "GET_INFO");
  EXPECT(info.errors > errors_before && info.regs_live == 0 && info.pages_mapped == 0,
         "counters: errors %llu->%llu live %llu mapped %llu", (unsigned long long)errors_before,
         (unsigned long long)info.errors, (unsigned long long)info.regs_live,
         (unsigned long long)info.pages_mapped);
  close(fd);
  snprintf(detail, len,
           "all invalid arguments refused with the documented errno; errors counter %llu",
           (unsigned long long)info.errors);
  return 0;
}

static int t_preadv_mixed(char *detail, size_t len) {
  struct region r;
  unsigned char *ram1 = ram_alloc(4096), *ram2 = ram_alloc(4096), *ref = ram_alloc(16 * KiB);
  struct iovec iov[3];
  uint64_t off = 3 * MiB;
  int raw, ret;
  ssize_t n;

  EXPECT(ram1 && ram2 && ref, "memory");
  raw = open(raw_path, O_RDONLY | O_DIRECT);
  EXPECT(raw >= 0, "open raw");
  ret = region_open(&r, 0, 8 * KiB);
  EXPECT(!ret, "region: %s", strerror(-ret));
  iov[0] = (struct iovec){ram1, 4096};
  iov[1] = (struct iovec){r.map, 8192};
  iov[2] = (struct iovec){ram2, 4096};
  n = preadv(raw, iov, 3, (off_t)off);
  EXPECT(n == 16384, "preadv returned %zd (%s)", n, strerror(errno));
  EXPECT(!read_exact(raw, ref, 16 * KiB, off), "reference read");
  EXPECT(!memcmp(ram1, ref, 4096) && !memcmp(r.map, ref + 4096, 8192) &&
             !memcmp(ram2, ref + 12288, 4096),
         "preadv pieces differ from a plain read");
  vm_evidence_disk(0, r.bar_off, off + 4096, 8192);
  EXPECT(!region_close(&r), "close");
  close(raw);
  snprintf(detail, len, "RAM+device+RAM iovec, 16 KiB at %llu", (unsigned long long)off);
  return 0;
}

static int t_ext4(char *detail, size_t len) {
  char path_in[256], path_out[256];
  const uint64_t size = 1 * MiB + 64 * KiB;
  unsigned char *pat = ram_alloc(size), *ram = ram_alloc(size);
  struct region rd, wr;
  int fd, ret;

  EXPECT(pat && ram, "memory");
  snprintf(path_in, sizeof(path_in), "%s/phx/ext4_in.bin", ext4_dir);
  snprintf(path_out, sizeof(path_out), "%s/phx/ext4_out.bin", ext4_dir);
  mkdir(path_in, 0); /* no-op guard against a stale directory */
  rmdir(path_in);

  pattern_fill(pat, size, 0xe4e4);
  fd = open(path_in, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  EXPECT(fd >= 0, "create %s: %s", path_in, strerror(errno));
  EXPECT(!write_exact(fd, pat, size, 0) && !fsync(fd), "write input file");
  close(fd);

  fd = open(path_in, O_RDONLY | O_DIRECT);
  EXPECT(fd >= 0, "open O_DIRECT: %s", strerror(errno));
  ret = region_open(&rd, 0, size);
  EXPECT(!ret, "region: %s", strerror(-ret));
  ret = read_exact(fd, rd.map, size, 0);
  EXPECT(!ret, "O_DIRECT read of an ext4 file into device memory: %s", strerror(-ret));
  EXPECT(first_diff(rd.map, pat, size) == size, "ext4 read differs");
  close(fd);
  vm_evidence_file(0, rd.bar_off, "phx/ext4_in.bin", 0, size);

  ret = region_open(&wr, 1, size);
  EXPECT(!ret, "region: %s", strerror(-ret));
  pattern_fill(wr.map, size, 0x0e4e);
  fd = open(path_out, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0644);
  EXPECT(fd >= 0, "create %s: %s", path_out, strerror(errno));
  ret = write_exact(fd, wr.map, size, 0);
  EXPECT(!ret && !fsync(fd), "O_DIRECT write from device memory to ext4: %s", strerror(-ret));
  EXPECT(!read_exact(fd, ram, size, 0), "read back");
  EXPECT(first_diff(ram, wr.map, size) == size, "ext4 file differs from device memory");
  close(fd);
  vm_evidence_file(1, wr.bar_off, "phx/ext4_out.bin", 0, size);
  EXPECT(!region_close(&rd) && !region_close(&wr), "close");
  free(pat);
  free(ram);
  snprintf(detail, len, "%llu bytes each way through ext4 O_DIRECT", (unsigned long long)size);
  return 0;
}

static int t_io_uring(char *detail, size_t len) {
  const unsigned int n = 16;
  const uint64_t blk = 64 * KiB;
  unsigned char *ref = ram_alloc(n * blk);
  struct io_uring ring;
  struct io_uring_cqe *cqe;
  struct region r;
  unsigned int i;
  int raw, ret;

  EXPECT(ref, "memory");
  raw = open(raw_path, O_RDONLY | O_DIRECT);
  EXPECT(raw >= 0, "open raw");
  ret = region_open(&r, 0, n * blk);
  EXPECT(!ret, "region: %s", strerror(-ret));
  ret = io_uring_queue_init(32, &ring, 0);
  EXPECT(!ret, "io_uring_queue_init: %s", strerror(-ret));
  /* Scattered offsets, submitted together. */
  for (i = 0; i < n; i++) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

    io_uring_prep_read(sqe, raw, r.map + i * blk, (unsigned)blk, (i * 37 % n) * 2 * MiB);
    sqe->user_data = i;
  }
  ret = io_uring_submit(&ring);
  EXPECT(ret == (int)n, "submit: %d", ret);
  for (i = 0; i < n; i++) {
    ret = io_uring_wait_cqe(&ring, &cqe);
    EXPECT(!ret, "wait: %s", strerror(-ret));
    EXPECT(cqe->res == (int)blk, "request %llu: res %d", (unsigned long long)cqe->user_data,
           cqe->res);
    io_uring_cqe_seen(&ring, cqe);
  }
  for (i = 0; i < n; i++) {
    EXPECT(!read_exact(raw, ref + i * blk, blk, (i * 37 % n) * 2 * MiB), "reference");
    EXPECT(!memcmp(ref + i * blk, r.map + i * blk, blk), "io_uring read %u differs", i);
    vm_evidence_disk(0, r.bar_off + i * blk, (i * 37 % n) * 2 * MiB, blk);
  }
  io_uring_queue_exit(&ring);
  EXPECT(!region_close(&r), "close");
  close(raw);
  snprintf(detail, len, "%u x 64 KiB reads in one submission", n);
  return 0;
}

/* Documents what each kernel does with fixed buffers over device pages. */
static int t_io_uring_fixed(char *detail, size_t len) {
  unsigned char *ref = ram_alloc(256 * KiB);
  struct io_uring ring;
  struct io_uring_cqe *cqe;
  struct io_uring_sqe *sqe;
  struct region r;
  struct iovec iov;
  int raw, ret;

  EXPECT(ref, "memory");
  raw = open(raw_path, O_RDONLY | O_DIRECT);
  EXPECT(raw >= 0, "open raw");
  ret = region_open(&r, 0, 256 * KiB);
  EXPECT(!ret, "region: %s", strerror(-ret));
  EXPECT(!io_uring_queue_init(4, &ring, 0), "ring");
  iov = (struct iovec){r.map, 256 * KiB};
  ret = io_uring_register_buffers(&ring, &iov, 1);
  if (ret) {
    /*
     * 6.1 refuses file-backed VMAs (EOPNOTSUPP); others fail the longterm
     * pin (EFAULT); with CONFIG_PCI_P2PDMA, GUP without FOLL_PCI_P2PDMA
     * refuses P2P pages (EREMOTEIO).
     */
    EXPECT(ret == -EOPNOTSUPP || ret == -EFAULT || ret == -EREMOTEIO,
           "register_buffers: unexpected %s", strerror(-ret));
    io_uring_queue_exit(&ring);
    EXPECT(!region_close(&r), "close");
    close(raw);
    snprintf(detail, len, "fixed buffers over device pages refused: %s (plain io_uring works)",
             strerror(-ret));
    return 0;
  }
  sqe = io_uring_get_sqe(&ring);
  io_uring_prep_read_fixed(sqe, raw, r.map, 256 * KiB, 5 * MiB, 0);
  EXPECT(io_uring_submit(&ring) == 1, "submit");
  EXPECT(!io_uring_wait_cqe(&ring, &cqe), "wait");
  EXPECT(cqe->res == (int)(256 * KiB), "read_fixed res %d", cqe->res);
  io_uring_cqe_seen(&ring, cqe);
  EXPECT(!read_exact(raw, ref, 256 * KiB, 5 * MiB), "reference");
  EXPECT(!memcmp(ref, r.map, 256 * KiB), "read_fixed data differs");
  vm_evidence_disk(0, r.bar_off, 5 * MiB, 256 * KiB);

  /*
   * DEREGISTER while the ring still pins the pages must wait (DMA could
   * still target them) but stay killable; the unpin then completes in the
   * background once the ring lets go.
   */
  {
    struct phxfs_info info;
    int status;
    struct region_ref dr = {r.fd, r.reg.handle, {-1, -1}};
    pid_t pid = spawn_same_mm(deregister_child, &dr);

    EXPECT(pid >= 0, "clone");
    usleep(300000);
    EXPECT(waitpid(pid, &status, WNOHANG) == 0,
           "DEREGISTER returned while io_uring still pinned the buffer");
    kill(pid, SIGKILL);
    EXPECT(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status),
           "a DEREGISTER waiting for pinned pages could not be killed (status %#x)", status);
    EXPECT(!phx_get_info(r.fd, &info) && info.regs_live == 1,
           "unpin must wait for the ring: live %llu", (unsigned long long)info.regs_live);
    io_uring_unregister_buffers(&ring);
    EXPECT(!wait_regs_idle(0, &info) && info.regs_live == 0,
           "deferred unpin did not finish: live %llu", (unsigned long long)info.regs_live);
  }
  io_uring_queue_exit(&ring);
  EXPECT(!munmap(r.map, r.reg.length), "munmap");
  close(r.fd);
  close(raw);
  snprintf(detail, len,
           "fixed buffers over device pages accepted; READ_FIXED data verified; DEREGISTER "
           "meanwhile waits, is killable, and completes once the ring lets go");
  return 0;
}

struct thread_arg {
  int index;
  int failed;
  char why[128];
};

static void *reader_thread(void *p) {
  struct thread_arg *a = p;
  const uint64_t blk = 64 * KiB, span = 1 * MiB;
  unsigned char *ref = ram_alloc(blk);
  struct region r;
  int raw = open(raw_path, O_RDONLY | O_DIRECT);
  int i, ret;

  ret = region_open(&r, a->index % 2, span);
  if (ret || raw < 0 || !ref) {
    a->failed = 1;
    snprintf(a->why, sizeof(a->why), "setup: %s", strerror(-ret));
    return NULL;
  }
  for (i = 0; i < 48; i++) {
    uint64_t slot = (uint64_t)((i * 7 + a->index) % 16);
    uint64_t disk = ((uint64_t)(a->index * 131 + i * 17) % 2000) * blk;

    if (read_exact(raw, r.map + slot * blk, blk, disk) || read_exact(raw, ref, blk, disk) ||
        memcmp(ref, r.map + slot * blk, blk)) {
      a->failed = 1;
      snprintf(a->why, sizeof(a->why), "thread %d read %d at %llu differs", a->index, i,
               (unsigned long long)disk);
      break;
    }
  }
  if (region_close(&r) && !a->failed) {
    a->failed = 1;
    snprintf(a->why, sizeof(a->why), "close");
  }
  close(raw);
  free(ref);
  return NULL;
}

static int t_threads(char *detail, size_t len) {
  pthread_t th[4];
  struct thread_arg args[4];
  int i;

  for (i = 0; i < 4; i++) {
    args[i] = (struct thread_arg){.index = i};
    EXPECT(!pthread_create(&th[i], NULL, reader_thread, &args[i]), "pthread_create");
  }
  for (i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  for (i = 0; i < 4; i++)
    EXPECT(!args[i].failed, "%s", args[i].why);
  snprintf(detail, len,
           "4 threads x 48 reads of 64 KiB, both devices, each with its own registration");
  return 0;
}

static int t_revoke_idle(char *detail, size_t len) {
  struct region r;
  struct phxfs_info info;
  unsigned char *ram = ram_alloc(64 * KiB);
  int raw, ret, sig;
  ssize_t n;

  EXPECT(ram, "memory");
  raw = open(raw_path, O_RDONLY | O_DIRECT);
  ret = region_open(&r, 0, 64 * KiB);
  EXPECT(!ret && raw >= 0, "setup: %s", strerror(-ret));
  EXPECT(!phx_get_info(r.fd, &info) && info.pages_mapped == 16 && info.regs_live == 1,
         "counters while mapped: mapped %llu live %llu", (unsigned long long)info.pages_mapped,
         (unsigned long long)info.regs_live);
  /* DEREGISTER with the mapping still in place revokes it. */
  EXPECT(!phx_deregister(r.fd, r.reg.handle), "deregister");
  sig = touch_signal(r.map);
  EXPECT(sig == SIGBUS, "touching a revoked mapping gave signal %d", sig);
  n = pread(raw, r.map, 64 * KiB, 0);
  EXPECT(n < 0 && errno == EFAULT, "O_DIRECT into a revoked mapping: %zd errno %d", n, errno);
  EXPECT(!phx_get_info(r.fd, &info) && info.pages_mapped == 0 && info.regs_live == 0,
         "counters after revoke: mapped %llu live %llu", (unsigned long long)info.pages_mapped,
         (unsigned long long)info.regs_live);
  EXPECT(!munmap(r.map, r.reg.length), "munmap after revoke");
  close(r.fd);
  close(raw);
  snprintf(detail, len,
           "deregister while mapped: SIGBUS on touch, EFAULT on I/O, counters back to 0");
  return 0;
}

static int t_revoke_during_io(char *detail, size_t len) {
  const uint64_t size = 16 * MiB;
  struct inflight f;
  struct region r;
  struct phxfs_info info;
  pthread_t th;
  int ret;

  ret = region_open(&r, 1, size);
  EXPECT(!ret, "region: %s", strerror(-ret));
  f = (struct inflight){.raw = open(raw_path, O_RDONLY | O_DIRECT), .map = r.map, .size = size};
  EXPECT(f.raw >= 0, "open raw");
  EXPECT(!pthread_create(&th, NULL, inflight_read, &f), "thread");
  usleep(2000);
  ret = phx_deregister(r.fd, r.reg.handle);
  pthread_join(th, NULL);
  EXPECT(!ret, "deregister during I/O: %s", strerror(-ret));
  EXPECT(f.result == (ssize_t)size || (f.result < 0 && f.err == EFAULT) ||
             (f.result >= 0 && f.result < (ssize_t)size),
         "read during revocation: %zd errno %d", f.result, f.err);
  EXPECT(!phx_get_info(r.fd, &info) && info.regs_live == 0 && info.pages_mapped == 0,
         "counters: live %llu mapped %llu", (unsigned long long)info.regs_live,
         (unsigned long long)info.pages_mapped);
  munmap(r.map, size);
  close(r.fd);
  close(f.raw);
  snprintf(detail, len, "deregister waited for the in-flight 16 MiB read (it returned %zd%s)",
           f.result, f.result < 0 ? ", EFAULT" : "");
  return 0;
}

static int t_munmap_first(char *detail, size_t len) {
  struct region r;
  struct phxfs_info info;
  int ret = region_open(&r, 0, 64 * KiB);

  EXPECT(!ret, "region: %s", strerror(-ret));
  EXPECT(!munmap(r.map, r.reg.length), "munmap");
  EXPECT(!phx_get_info(r.fd, &info) && info.pages_mapped == 0 && info.regs_live == 1,
         "after munmap: mapped %llu live %llu", (unsigned long long)info.pages_mapped,
         (unsigned long long)info.regs_live);
  /* Mapping again after munmap is allowed. */
  r.map = phx_map(r.fd, &r.reg);
  EXPECT(r.map, "map again: %s", strerror(errno));
  EXPECT(!munmap(r.map, r.reg.length), "munmap again");
  EXPECT(!phx_deregister(r.fd, r.reg.handle), "deregister after munmap");
  close(r.fd);
  snprintf(detail, len, "munmap, remap, munmap, deregister");
  return 0;
}

static int t_madv_dontneed(char *detail, size_t len) {
  struct region r;
  unsigned char *ref = ram_alloc(64 * KiB);
  int raw = open(raw_path, O_RDONLY | O_DIRECT), ret = region_open(&r, 0, 64 * KiB);

  EXPECT(!ret && raw >= 0 && ref, "setup: %s", strerror(-ret));
  pattern_fill(r.map, 64 * KiB, 77);
  pattern_fill(ref, 64 * KiB, 77);
  EXPECT(!madvise(r.map, 64 * KiB, MADV_DONTNEED), "madvise: %s", strerror(errno));
  /* The pages come back on the next touch, with the device's bytes. */
  EXPECT(!memcmp(r.map, ref, 64 * KiB), "device bytes changed after MADV_DONTNEED");
  EXPECT(!madvise(r.map, 64 * KiB, MADV_DONTNEED), "madvise again");
  EXPECT(!read_exact(raw, r.map, 64 * KiB, 11 * MiB) && !read_exact(raw, ref, 64 * KiB, 11 * MiB) &&
             !memcmp(ref, r.map, 64 * KiB),
         "O_DIRECT into a zapped range");
  vm_evidence_disk(0, r.bar_off, 11 * MiB, 64 * KiB);
  EXPECT(!region_close(&r), "close");
  close(raw);
  free(ref);
  snprintf(detail, len, "MADV_DONTNEED: pages fault back in, data and O_DIRECT intact");
  return 0;
}

static int t_fork(char *detail, size_t len) {
  struct region r;
  int status, ret = region_open(&r, 0, 64 * KiB);
  pid_t pid;

  EXPECT(!ret, "region: %s", strerror(-ret));
  r.map[0] = 0x5a;
  pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    /* VM_DONTCOPY: the child has no mapping there. */
    _exit(touch_signal(r.map) == SIGSEGV ? 0 : 1);
  }
  EXPECT(waitpid(pid, &status, 0) == pid, "waitpid");
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "child could touch device memory (status %#x)", status);
  EXPECT(r.map[0] == 0x5a, "parent's mapping changed");
  EXPECT(!region_close(&r), "close");
  snprintf(detail, len, "forked child does not inherit the mapping; parent keeps it");
  return 0;
}

static int t_kill_live(char *detail, size_t len) {
  struct phxfs_info info;
  int pipefd[2], status;
  uint64_t off;
  pid_t pid;
  char c;

  EXPECT(!bar_alloc(1, 4 * MiB, &off), "space");
  EXPECT(!pipe(pipefd), "pipe");
  pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    struct phxfs_register r;
    int cfd = phx_open_dev(1), raw = open(raw_path, O_RDONLY | O_DIRECT);
    void *m;

    if (cfd < 0 || phx_register(cfd, off, 4 * MiB, &r) || !(m = phx_map(cfd, &r)))
      _exit(2);
    if (write(pipefd[1], "r", 1) != 1)
      _exit(3);
    for (;;)
      if (pread(raw, m, 4 * MiB, 0) < 0)
        _exit(4);
  }
  close(pipefd[1]);
  EXPECT(read(pipefd[0], &c, 1) == 1, "child did not register");
  usleep(5000);
  kill(pid, SIGKILL);
  EXPECT(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status), "child status %#x", status);
  close(pipefd[0]);
  EXPECT(!wait_regs_idle(1, &info), "info");
  EXPECT(info.regs_live == 0 && info.pages_mapped == 0, "after kill: live %llu mapped %llu",
         (unsigned long long)info.regs_live, (unsigned long long)info.pages_mapped);
  snprintf(detail, len, "SIGKILL during I/O with a live registration: all torn down");
  return 0;
}

static int t_two_devices(char *detail, size_t len) {
  struct region a, b;
  const uint64_t size = 512 * KiB, disk = 9 * MiB;
  int raw = open(raw_path, O_RDONLY | O_DIRECT), ret;

  EXPECT(raw >= 0, "open raw");
  ret = region_open(&a, 0, size);
  EXPECT(!ret, "dev0: %s", strerror(-ret));
  ret = region_open(&b, 1, size);
  EXPECT(!ret, "dev1: %s", strerror(-ret));
  EXPECT(!read_exact(raw, a.map, size, disk) && !read_exact(raw, b.map, size, disk), "reads");
  EXPECT(!memcmp(a.map, b.map, size), "the two devices got different bytes");
  vm_evidence_disk(0, a.bar_off, disk, size);
  vm_evidence_disk(1, b.bar_off, disk, size);
  EXPECT(!region_close(&a) && !region_close(&b), "close");
  close(raw);
  snprintf(detail, len, "same 512 KiB read into both devices");
  return 0;
}

static double monotonic_s(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct pipe_release {
  int fds[2];
  useconds_t after_us;
  double at;
};

static void *release_pipe(void *p) {
  struct pipe_release *pr = p;

  usleep(pr->after_us);
  pr->at = monotonic_s();
  close(pr->fds[0]);
  close(pr->fds[1]);
  return NULL;
}

/*
 * A REGISTER of pages that a registration being torn down still claims
 * waits for the teardown, a bounded time: with NVIDIA's legacy API the
 * driver can hand freed memory to a new allocation while the old
 * DEREGISTER still waits for DMA in flight.  Here a vmsplice'd pipe holds
 * the old pages' references (GUP, as DMA in flight does) until it closes.
 */
static int t_register_waits_for_teardown(char *detail, size_t len) {
  const uint64_t size = 64 * KiB, disk = 11 * MiB;
  unsigned char *ref = ram_alloc(size);
  struct pipe_release pr = {.after_us = 500000};
  struct region_ref dr;
  struct phxfs_register again;
  struct phxfs_info info;
  struct region r;
  struct iovec iov;
  pthread_t releaser;
  double busy_s, enter, done;
  ssize_t spliced;
  int raw, fd2, ret, status;
  unsigned char *map;
  pid_t pid;

  EXPECT(ref, "memory");
  raw = open(raw_path, O_RDONLY | O_DIRECT);
  EXPECT(raw >= 0, "open raw");
  ret = region_open(&r, 0, size);
  EXPECT(!ret, "region: %s", strerror(-ret));
  memset(r.map, 0x5a, size);
  EXPECT(!pipe(pr.fds), "pipe");
  iov = (struct iovec){r.map, size};
  spliced = vmsplice(pr.fds[1], &iov, 1, 0);
  if (spliced < 0 && errno == EREMOTEIO) {
    /* CONFIG_PCI_P2PDMA: GUP without FOLL_PCI_P2PDMA refuses P2P pages. */
    close(pr.fds[0]);
    close(pr.fds[1]);
    EXPECT(!region_close(&r), "close");
    close(raw);
    free(ref);
    snprintf(detail, len,
             "vmsplice cannot hold P2PDMA pages on this kernel (EREMOTEIO): "
             "no user-space holder to wait for");
    return 1;
  }
  EXPECT(spliced == (ssize_t)size, "vmsplice: %s", strerror(errno));
  dr = (struct region_ref){r.fd, r.reg.handle, {pr.fds[0], pr.fds[1]}};
  pid = spawn_same_mm(deregister_child, &dr);
  EXPECT(pid >= 0, "clone");
  usleep(300000);
  EXPECT(waitpid(pid, &status, WNOHANG) == 0, "DEREGISTER returned while a pipe held the pages");
  fd2 = phx_open_dev(0);
  EXPECT(fd2 >= 0, "open");

  /* The pipe keeps its references: EBUSY, after the bounded wait. */
  enter = monotonic_s();
  ret = phx_register(fd2, r.bar_off, size, &again);
  busy_s = monotonic_s() - enter;
  EXPECT(ret == -EBUSY, "REGISTER while the old pages stay referenced: %s", strerror(-ret));
  EXPECT(busy_s >= 0.5 && busy_s < 10, "REGISTER gave EBUSY after %.3f s, not a bounded wait",
         busy_s);

  /* The pipe closes while REGISTER waits: the teardown ends, REGISTER succeeds. */
  EXPECT(!pthread_create(&releaser, NULL, release_pipe, &pr), "thread");
  enter = monotonic_s();
  ret = phx_register(fd2, r.bar_off, size, &again);
  done = monotonic_s();
  pthread_join(releaser, NULL);
  EXPECT(enter < pr.at, "REGISTER started %.3f s after the pipe closed: nothing was tested",
         enter - pr.at);
  EXPECT(!ret, "REGISTER during the old registration's teardown: %s", strerror(-ret));
  EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "the DEREGISTER that waited failed (status %#x)", status);
  EXPECT(touch_signal(r.map) == SIGBUS, "the old mapping still reaches the pages");
  EXPECT(!munmap(r.map, size), "munmap");
  close(r.fd);

  map = phx_map(fd2, &again);
  EXPECT(map, "mmap of the new registration: %s", strerror(errno));
  EXPECT(!read_exact(raw, map, size, disk) && !read_exact(raw, ref, size, disk), "reads");
  EXPECT(!memcmp(map, ref, size), "the new registration read other bytes");
  vm_evidence_disk(0, r.bar_off, disk, size);
  EXPECT(!munmap(map, size) && !phx_deregister(fd2, again.handle), "close the new registration");
  EXPECT(!phx_get_info(fd2, &info) && info.regs_live == 0 && info.pages_mapped == 0,
         "counters: live %llu mapped %llu", (unsigned long long)info.regs_live,
         (unsigned long long)info.pages_mapped);
  close(fd2);
  close(raw);
  snprintf(detail, len,
           "held pages: EBUSY after %.2f s; released while waiting: REGISTER done %.2f s after "
           "the release, 64 KiB read verified",
           busy_s, done - pr.at);
  return 0;
}

struct timed_deregister {
  int fd;
  uint64_t handle;
  int ret;
  long switches; /* voluntary context switches of the thread meanwhile */
  double seconds;
};

static void *timed_deregister(void *p) {
  struct timed_deregister *d = p;
  struct rusage before, after;
  double start = monotonic_s();

  getrusage(RUSAGE_THREAD, &before);
  d->ret = phx_deregister(d->fd, d->handle);
  getrusage(RUSAGE_THREAD, &after);
  d->seconds = monotonic_s() - start;
  d->switches = after.ru_nvcsw - before.ru_nvcsw;
  return NULL;
}

/*
 * A DEREGISTER that waits for page references user space holds (a
 * vmsplice'd pipe, as for DMA in flight) must sleep, not poll: the old
 * wait looked every 50-200 us, thousands of wake-ups a second for as long
 * as user space liked.
 */
static int t_deregister_wait_sleeps(char *detail, size_t len) {
  const uint64_t size = 64 * KiB;
  struct timed_deregister d = {0};
  struct phxfs_info info;
  struct region r;
  struct iovec iov;
  pthread_t th;
  ssize_t spliced;
  int fds[2], ret;

  ret = region_open(&r, 0, size);
  EXPECT(!ret, "region: %s", strerror(-ret));
  memset(r.map, 0x3c, size);
  EXPECT(!pipe(fds), "pipe");
  iov = (struct iovec){r.map, size};
  spliced = vmsplice(fds[1], &iov, 1, 0);
  if (spliced < 0 && errno == EREMOTEIO) {
    /* CONFIG_PCI_P2PDMA: GUP without FOLL_PCI_P2PDMA refuses P2P pages. */
    close(fds[0]);
    close(fds[1]);
    EXPECT(!region_close(&r), "close");
    snprintf(detail, len,
             "vmsplice cannot hold P2PDMA pages on this kernel (EREMOTEIO): "
             "no user-space holder to wait for");
    return 1;
  }
  EXPECT(spliced == (ssize_t)size, "vmsplice: %s", strerror(errno));
  d.fd = r.fd;
  d.handle = r.reg.handle;
  EXPECT(!pthread_create(&th, NULL, timed_deregister, &d), "thread");
  sleep(2);
  close(fds[0]);
  close(fds[1]);
  pthread_join(th, NULL);
  EXPECT(!d.ret, "DEREGISTER: %s", strerror(-d.ret));
  EXPECT(d.seconds >= 1.5, "DEREGISTER returned after %.2f s while a pipe held the pages",
         d.seconds);
  EXPECT(d.switches < 200,
         "DEREGISTER waiting %.2f s for held pages woke %ld times: it polls instead of sleeping",
         d.seconds, d.switches);
  EXPECT(touch_signal(r.map) == SIGBUS, "the mapping still reaches the pages");
  EXPECT(!munmap(r.map, size), "munmap");
  EXPECT(!phx_get_info(r.fd, &info) && info.regs_live == 0, "regs_live %llu",
         (unsigned long long)info.regs_live);
  close(r.fd);
  snprintf(detail, len, "DEREGISTER waited %.2f s for a vmsplice'd pipe with %ld wake-ups",
           d.seconds, d.switches);
  return 0;
}

/*
 * A process that exits while something else holds references to its
 * registered pages must still exit.  Here the child vmsplices the pages
 * of @n registrations of @each bytes into a pipe this process keeps open,
 * then exits with them live; io_uring fixed buffers of a ring whose
 * release comes after the phxfs file's are the same case.  An exiting
 * task cannot be killed any more, so the last close may wait for the pages
 * only a bounded time, for all its registrations together, and leaves the
 * rest to work items, which finish once the pipe lets go.
 */
static int exit_holding_pages(int n, uint64_t each, char *detail, size_t len) {
  struct phxfs_info info;
  int fds[2], status = 0, i, info_fd, info_ok;
  double start, exited_s = -1;
  uint64_t off;
  pid_t pid, done = 0;

  EXPECT(!bar_alloc(0, n * each, &off), "space");
  EXPECT(!pipe(fds), "pipe");
  EXPECT(fcntl(fds[1], F_SETPIPE_SZ, (int)(n * each > 64 * KiB ? n * each : 64 * KiB)) >= 0,
         "F_SETPIPE_SZ: %s", strerror(errno));
  pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    int cfd = phx_open_dev(0);

    if (cfd < 0)
      _exit(2);
    for (i = 0; i < n; i++) {
      struct phxfs_register r;
      struct iovec iov;
      void *m;

      if (phx_register(cfd, off + i * each, each, &r) || !(m = phx_map(cfd, &r)))
        _exit(2);
      memset(m, 0x6b, each);
      iov = (struct iovec){m, each};
      if (vmsplice(fds[1], &iov, 1, 0) != (ssize_t)each)
        _exit(errno == EREMOTEIO ? 77 : 3);
    }
    _exit(0); /* the registrations, the mappings and the file go with the exit */
  }
  start = monotonic_s();
  for (i = 0; i < 500 && !done; i++) {
    done = waitpid(pid, &status, WNOHANG);
    if (!done)
      usleep(10000);
  }
  if (done == pid)
    exited_s = monotonic_s() - start;
  info_fd = phx_open_dev(0);
  info_ok = info_fd >= 0 && !phx_get_info(info_fd, &info);
  if (info_fd >= 0)
    close(info_fd);
  /* Let go of the pages (first: a child stuck in its exit finishes then). */
  close(fds[0]);
  close(fds[1]);
  if (!done)
    EXPECT(waitpid(pid, &status, 0) == pid, "waitpid");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    snprintf(detail, len,
             "vmsplice cannot hold P2PDMA pages on this kernel (EREMOTEIO): "
             "no user-space holder to wait for");
    return 1;
  }
  EXPECT(exited_s >= 0, "the child's exit waited for the pipe's page references (over 5 s)");
  EXPECT(exited_s < 2, "the child's exit took %.2f s: each of its %d registrations waited",
         exited_s, n);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
  EXPECT(info_ok, "GET_INFO: %s", strerror(errno));
  EXPECT(info.regs_live == (uint64_t)n,
         "while the pipe held the pages: live %llu, expected %d (deferred)",
         (unsigned long long)info.regs_live, n);
  EXPECT(!wait_regs_idle(0, &info) && info.regs_live == 0 && info.pages_mapped == 0,
         "after the pipe closed: live %llu mapped %llu", (unsigned long long)info.regs_live,
         (unsigned long long)info.pages_mapped);
  snprintf(detail, len,
           "exit with the pages of %d registration%s in a pipe took %.2f s; the teardowns "
           "finished once the pipe closed",
           n, n == 1 ? "" : "s", exited_s);
  return 0;
}

static int t_exit_holding_pages(char *detail, size_t len) {
  return exit_holding_pages(1, 64 * KiB, detail, len);
}

static int t_exit_holding_many(char *detail, size_t len) {
  return exit_holding_pages(64, 4 * KiB, detail, len);
}

/*
 * GET_INFO answers user space built against a newer ABI with the version
 * the module speaks and its features, instead of EPROTO; the other ioctls
 * still refuse versions the module does not know.
 */
static int t_info_newer_abi(char *detail, size_t len) {
  struct phxfs_info info;
  struct phxfs_register r;
  int fd = phx_open_dev(0), ret;

  EXPECT(fd >= 0, "open: %s", strerror(errno));
  memset(&info, 0, sizeof(info));
  info.abi_version = PHXFS_ABI_VERSION + 7;
  info.argsz = sizeof(info);
  ret = ioctl(fd, PHXFS_IOC_GET_INFO, &info) ? errno : 0;
  EXPECT(!ret, "GET_INFO with abi_version %u: %s", PHXFS_ABI_VERSION + 7, strerror(ret));
  EXPECT(info.abi_version == PHXFS_ABI_VERSION && info.argsz == sizeof(info),
         "GET_INFO reported abi_version %u argsz %u", info.abi_version, info.argsz);
  EXPECT(info.features & PHXFS_FEATURE_ABI_RANGE, "features %#llx",
         (unsigned long long)info.features);
  info.abi_version = 0;
  ret = ioctl(fd, PHXFS_IOC_GET_INFO, &info) ? errno : 0;
  EXPECT(ret == EPROTO, "GET_INFO with abi_version 0: %s", ret ? strerror(ret) : "succeeded");
  memset(&r, 0, sizeof(r));
  r.abi_version = PHXFS_ABI_VERSION + 1;
  r.argsz = sizeof(r);
  r.length = 4096;
  ret = ioctl(fd, PHXFS_IOC_REGISTER, &r) ? errno : 0;
  EXPECT(ret == EPROTO, "REGISTER with a newer abi_version: %s", ret ? strerror(ret) : "succeeded");
  close(fd);
  snprintf(detail, len, "newer caller learns ABI %u, features %#llx; REGISTER of it is EPROTO",
           PHXFS_ABI_VERSION, (unsigned long long)info.features);
  return 0;
}

int vmtest_pcibar(void) {
  int raw;

  raw_path = getenv("PHX_RAW_DEV");
  ext4_dir = getenv("PHX_EXT4_DIR");
  if (!raw_path || !ext4_dir) {
    vm_result("pcibar/setup", -1, "PHX_RAW_DEV and PHX_EXT4_DIR must be set");
    return 1;
  }
  raw = open(raw_path, O_RDONLY);
  if (raw < 0 || ioctl(raw, BLKGETSIZE64, &disk_size) || disk_size < 128 * MiB) {
    vm_result("pcibar/setup", -1, "raw device missing or smaller than 128 MiB");
    return 1;
  }
  close(raw);
  write_next = disk_size / 2;

  vm_run("pcibar/info", t_info);
  vm_run("pcibar/info_newer_abi", t_info_newer_abi);
  vm_run("pcibar/bad_input", t_bad_input);
  vm_run("pcibar/rw_4k", t_rw_4k);
  vm_run("pcibar/rw_8k", t_rw_8k);
  vm_run("pcibar/rw_12k", t_rw_12k);
  vm_run("pcibar/rw_64k", t_rw_64k);
  vm_run("pcibar/rw_68k", t_rw_68k);
  vm_run("pcibar/rw_1m", t_rw_1m);
  vm_run("pcibar/rw_past_max_hw_sectors", t_rw_past_max_hw);
  vm_run("pcibar/rw_64m", t_rw_64m);
  vm_run("pcibar/preadv_ram_and_device", t_preadv_mixed);
  vm_run("pcibar/ext4", t_ext4);
  vm_run("pcibar/io_uring", t_io_uring);
  vm_run("pcibar/io_uring_fixed_buffers", t_io_uring_fixed);
  vm_run("pcibar/threads", t_threads);
  vm_run("pcibar/two_devices", t_two_devices);
  vm_run("pcibar/munmap_before_deregister", t_munmap_first);
  vm_run("pcibar/revoke_idle", t_revoke_idle);
  vm_run("pcibar/revoke_during_io", t_revoke_during_io);
  vm_run("pcibar/madv_dontneed", t_madv_dontneed);
  vm_run("pcibar/fork", t_fork);
  vm_run("pcibar/kill_with_live_registration", t_kill_live);
  vm_run("pcibar/register_waits_for_teardown", t_register_waits_for_teardown);
  vm_run("pcibar/deregister_wait_sleeps", t_deregister_wait_sleeps);
  vm_run("pcibar/exit_while_a_pipe_holds_pages", t_exit_holding_pages);
  vm_run("pcibar/exit_while_a_pipe_holds_many", t_exit_holding_many);
  return vm_failures() ? 1 : 0;
}
