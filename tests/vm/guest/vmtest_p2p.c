// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_p2p.c - the PCI distance between the NVMe and the device memory.
 *
 * guest.sh loads phxfs with two devices: dev0 is the "far" BAR on the root
 * bus, dev1 a BAR behind the PCIe switch that also holds the NVMe drives.
 * On a kernel with CONFIG_PCI_P2PDMA (GET_INFO's PHXFS_INFO_P2PDMA) the
 * block layer maps P2P pages only when the two devices are a P2P distance
 * apart (a common switch, or a whitelisted host bridge, which QEMU's Q35 is
 * not): the read into the near BAR must work and the read into the far one
 * must fail with an error, leaving the BAR's bytes as they were (never
 * wrong data, never a hang).  Without P2PDMA the block layer treats the
 * pages like RAM and both reads work.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vmtest.h"
#include "vmtest_pcibar.h"

#define P2P_LEN (64 * KiB)
#define P2P_DISK_OFF (96 * MiB)
/* Above the many-devices group's evidence at the start of each small BAR. */
#define P2P_BAR_OFF (2 * MiB)
/* The host's index of the near BAR's shm file (third behind the switch). */
#define NEAR_SHM 2

struct p2p_read {
  ssize_t got;
  int err;
  bool p2pdma;
  bool unchanged; /* the BAR still holds the pattern written before */
  bool matches;   /* the BAR holds the disk's bytes */
};

/* Registers 64 KiB of /dev/phxfs_dev<index>, fills it with a pattern, then
 * reads the raw disk into it with O_DIRECT. */
static int p2p_read_into(unsigned int index, const unsigned char *disk, struct p2p_read *out,
                         char *detail, size_t len) {
  const char *raw_path = getenv("PHX_RAW_DEV");
  unsigned char *before = ram_alloc(P2P_LEN);
  struct phxfs_register r;
  struct phxfs_info info;
  unsigned char *map;
  int fd, raw;

  EXPECT(raw_path && before, "setup");
  fd = phx_open_dev(index);
  EXPECT(fd >= 0 && !phx_get_info(fd, &info), "dev%u: %s", index, strerror(errno));
  out->p2pdma = info.flags & PHXFS_INFO_P2PDMA;
  EXPECT(!phx_register(fd, P2P_BAR_OFF, P2P_LEN, &r), "dev%u: register: %s", index,
         strerror(errno));
  map = phx_map(fd, &r);
  EXPECT(map, "dev%u: mmap", index);
  pattern_fill(before, P2P_LEN, 0x7032700000ULL + index);
  memcpy(map, before, P2P_LEN);
  raw = open(raw_path, O_RDONLY | O_DIRECT);
  EXPECT(raw >= 0, "open %s", raw_path);
  errno = 0;
  out->got = pread(raw, map, P2P_LEN, P2P_DISK_OFF);
  out->err = out->got < 0 ? errno : 0;
  close(raw);
  out->unchanged = !memcmp(map, before, P2P_LEN);
  out->matches = !memcmp(map, disk, P2P_LEN);
  EXPECT(!munmap(map, P2P_LEN) && !phx_deregister(fd, r.handle), "dev%u: teardown", index);
  close(fd);
  free(before);
  return 0;
}

static int t_distance(char *detail, size_t len) {
  const char *raw_path = getenv("PHX_RAW_DEV");
  unsigned char *disk = ram_alloc(P2P_LEN);
  struct p2p_read far = {0}, near = {0};
  int raw, ret;

  EXPECT(raw_path && disk, "setup");
  raw = open(raw_path, O_RDONLY | O_DIRECT);
  EXPECT(raw >= 0 && !read_exact(raw, disk, P2P_LEN, P2P_DISK_OFF), "read the disk into RAM");
  close(raw);
  ret = p2p_read_into(1, disk, &near, detail, len);
  if (ret)
    return ret;
  ret = p2p_read_into(0, disk, &far, detail, len);
  if (ret)
    return ret;
  free(disk);

  EXPECT(near.got == P2P_LEN && near.matches, "near BAR: pread %zd (%s), data %s", near.got,
         strerror(near.err), near.matches ? "equal" : "differs");
  vm_evidence_disk(NEAR_SHM, P2P_BAR_OFF, P2P_DISK_OFF, P2P_LEN);
  if (!far.p2pdma) {
    EXPECT(far.got == P2P_LEN && far.matches, "far BAR without P2PDMA: pread %zd (%s), data %s",
           far.got, strerror(far.err), far.matches ? "equal" : "differs");
    snprintf(detail, len, "no P2PDMA: near and far reads both land, bytes equal");
    return 0;
  }
  EXPECT(far.got < 0, "far BAR with P2PDMA: pread returned %zd, not an error (data %s)", far.got,
         far.matches ? "equal" : "differs");
  EXPECT(far.err == EREMOTEIO || far.err == EINVAL || far.err == EIO,
         "far BAR: unexpected errno %d (%s)", far.err, strerror(far.err));
  EXPECT(far.unchanged, "far BAR: the failed read changed the BAR's bytes");
  snprintf(detail, len,
           "P2PDMA: near read lands, bytes equal; far read fails with %s, BAR untouched",
           strerror(far.err));
  return 0;
}

/* sysfs p2pmem file of the far BAR (only on P2PDMA kernels). */
static int p2pmem_path(char *out, size_t n, const char *file) {
  const char *bdf = getenv("PHX_PCIBAR_FAR_BDF");

  if (!bdf)
    return -1;
  snprintf(out, n, "/sys/bus/pci/devices/%s/p2pmem/%s", bdf, file);
  return 0;
}

static long read_number(const char *path) {
  char buf[64] = {0};
  long v = -1;
  int fd = open(path, O_RDONLY);

  if (fd >= 0) {
    if (read(fd, buf, sizeof(buf) - 1) > 0)
      v = strtol(buf, NULL, 0);
    close(fd);
  }
  return v;
}

/*
 * phxfs loaded on the far BAR: the p2pdma pool has no page left for anyone
 * else (sysfs p2pmem/allocate cannot map one), so no page has two owners.
 */
static int t_pool_owned(char *detail, size_t len) {
  char path[256];
  long size, avail;
  void *p;
  int fd;

  if (p2pmem_path(path, sizeof(path), "size") || access(path, F_OK)) {
    snprintf(detail, len, "no p2pmem in sysfs: kernel without CONFIG_PCI_P2PDMA");
    return 1;
  }
  size = read_number(path);
  EXPECT(!p2pmem_path(path, sizeof(path), "available"), "path");
  avail = read_number(path);
  EXPECT(size >= (long)(4 * MiB) && avail == 0, "p2pmem size %ld available %ld", size, avail);
  EXPECT(!p2pmem_path(path, sizeof(path), "allocate"), "path");
  fd = open(path, O_RDWR);
  EXPECT(fd >= 0, "open %s: %s", path, strerror(errno));
  p = mmap(NULL, 4 * KiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  EXPECT(p == MAP_FAILED, "p2pmem/allocate handed out a page phxfs owns");
  EXPECT(errno == ENOMEM, "p2pmem/allocate: %s, not ENOMEM", strerror(errno));
  close(fd);
  snprintf(detail, len, "pool of %ld bytes all phxfs's: p2pmem/allocate gets ENOMEM", size);
  return 0;
}

static int insmod_far(void) {
  char cmd[256];

  snprintf(cmd, sizeof(cmd), "insmod /phx/phxfs.ko pcibar=%s@2 2>/dev/null",
           getenv("PHX_PCIBAR_FAR_BDF"));
  return system(cmd);
}

/*
 * phxfs unloaded: its pool is free again; while another user holds a page
 * of it, phxfs refuses the BAR rather than share it, and once the page is
 * back it adopts the pool it left.
 */
static int t_pool_foreign(char *detail, size_t len) {
  char path[256];
  struct phxfs_register r;
  void *p;
  int fd, dev, loaded;

  if (p2pmem_path(path, sizeof(path), "allocate") || access(path, F_OK)) {
    snprintf(detail, len, "no p2pmem in sysfs: kernel without CONFIG_PCI_P2PDMA");
    return 1;
  }
  fd = open(path, O_RDWR);
  EXPECT(fd >= 0, "open %s: %s", path, strerror(errno));
  p = mmap(NULL, 4 * KiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  EXPECT(p != MAP_FAILED, "p2pmem/allocate after phxfs unloaded: %s", strerror(errno));
  memset(p, 0x5a, 4 * KiB);
  loaded = insmod_far() == 0;
  if (loaded)
    (void)system("rmmod phxfs");
  EXPECT(!loaded, "phxfs loaded on a BAR whose pool another user holds a page of");
  EXPECT(((unsigned char *)p)[4095] == 0x5a, "the other user's page changed");
  EXPECT(!munmap(p, 4 * KiB), "munmap");
  close(fd);
  EXPECT(insmod_far() == 0, "phxfs does not load once the page is back");
  dev = phx_open_dev(0);
  EXPECT(dev >= 0 && !phx_register(dev, 0, 64 * KiB, &r) && !phx_deregister(dev, r.handle),
         "register on the adopted pool: %s", strerror(errno));
  close(dev);
  EXPECT(system("rmmod phxfs") == 0, "rmmod");
  snprintf(detail, len,
           "refused while another user held a pool page (EBUSY), adopted its own pool after");
  return 0;
}

/* vm/run --high-bar: the host's index of the high BAR's backing file. */
#define HIGH_SHM 9
#define HIGH_DISK_OFF (40 * MiB)

/* phxfs loaded on the high BAR alone (highbar.sh): a read into its end. */
static int t_high_bar(char *detail, size_t len) {
  const char *raw_path = getenv("PHX_RAW_DEV");
  unsigned char *ram = ram_alloc(P2P_LEN);
  struct phxfs_register r;
  struct phxfs_info info;
  unsigned char *map;
  uint64_t off;
  int fd, raw;

  EXPECT(raw_path && ram, "setup");
  fd = phx_open_dev(0);
  EXPECT(fd >= 0 && !phx_get_info(fd, &info), "dev0: %s", strerror(errno));
  off = info.bar_size - P2P_LEN;
  EXPECT(!phx_register(fd, off, P2P_LEN, &r), "register at %llu: %s", (unsigned long long)off,
         strerror(errno));
  map = phx_map(fd, &r);
  EXPECT(map, "mmap");
  raw = open(raw_path, O_RDONLY | O_DIRECT);
  EXPECT(raw >= 0, "open %s", raw_path);
  EXPECT(!read_exact(raw, map, P2P_LEN, HIGH_DISK_OFF) &&
             !read_exact(raw, ram, P2P_LEN, HIGH_DISK_OFF) && !memcmp(map, ram, P2P_LEN),
         "read into the high BAR differs");
  close(raw);
  vm_evidence_disk(HIGH_SHM, off, HIGH_DISK_OFF, P2P_LEN);
  EXPECT(!munmap(map, P2P_LEN) && !phx_deregister(fd, r.handle), "teardown");
  close(fd);
  free(ram);
  snprintf(detail, len, "served (%s): 64 KiB read into the BAR's last page, bytes equal",
           info.flags & PHXFS_INFO_P2PDMA ? "P2PDMA" : "own pgmap");
  return 0;
}

int vmtest_high_bar(void) {
  vm_run("highbar/load", t_high_bar);
  vm_run("highbar/claim_walks_yield", t_claim_walks_yield);
  vm_run("highbar/walks_share_the_cpu", t_walks_share_the_cpu);
  vm_run("highbar/starved_walkers_beside_register", t_starved_walkers_beside_register);
  vm_run("highbar/poller_walks_outside_its_lock", t_poller_walks_outside_its_lock);
  return vm_failures() ? 1 : 0;
}

int vmtest_p2p(void) {
  vm_run("p2p/distance", t_distance);
  return vm_failures() ? 1 : 0;
}

int vmtest_p2p_pool(const char *mode) {
  if (!strcmp(mode, "owned"))
    vm_run("p2p/pool_owned", t_pool_owned);
  else
    vm_run("p2p/pool_foreign", t_pool_foreign);
  return vm_failures() ? 1 : 0;
}
