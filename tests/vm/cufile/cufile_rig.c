// SPDX-License-Identifier: GPL-2.0
/*
 * cufile_rig.c - the cuFile client (tests/unit/cufile_shim/cufile_client.c)
 * in the rig's guest: libphoenix-cufile linked statically, over the direct
 * engine on phxfs's PCI BAR provider, where a "device pointer" is a byte
 * offset into the BAR of /dev/phxfs_dev0 (the shim's default device).
 * There is no CUDA: the shim proves such a pointer is device memory by the
 * BAR's size and by it not being this process's memory.
 *
 * Device bytes are read and filled through a mapping of our own (REGISTER
 * + mmap on another open of the node), never through the shim, and only
 * while the shim holds no registration of them.  Each range checked is
 * also reported as evidence, so the host compares the ivshmem file with the
 * test file on the ext4 image after the VM exits.
 *
 * BAR bytes [121 MiB, 128 MiB) of device 0 belong to this case (the pcibar
 * group's evidence lies below 120 MiB, the many-devices group's at 120 MiB,
 * the NVIDIA emulation above 128 MiB).
 *
 * Usage: phx-cufile-test (as guest.sh runs it: phxfs loaded with the PCI
 * BAR provider, PHX_EXT4_DIR and PHX_REPORT set).  Exits 0 when every check
 * passed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cufile_client.h"
#include "vmtest.h"

#define RIG_BUFFER_A (121 * MiB)
#define RIG_BUFFER_B (124 * MiB)
#define RIG_SHM 0 /* /dev/phxfs_dev0 is ivshmem #0 (guest.sh's load_pcibar) */

static int node = -1;
static char dir[4096];
static const char *ext4;

static void *rig_alloc(int which, size_t size) {
  (void)size;
  /* A BAR offset, as the direct engine takes device addresses on pcibar. */
  return (void *)(uintptr_t)(which == 0 ? RIG_BUFFER_A : RIG_BUFFER_B);
}

static void rig_release(void *device, size_t size) {
  (void)device;
  (void)size;
}

/* Copies between host memory and BAR bytes [device, +size) through a
 * registration of our own on the pages around them. */
static int rig_copy(void *host, const void *device, size_t size, int to_device) {
  const uint64_t at = (uint64_t)(uintptr_t)device;
  const uint64_t lo = at & ~4095ULL;
  const uint64_t len = (at + size - lo + 4095) & ~4095ULL;
  struct phxfs_register reg;
  int ret = phx_register(node, lo, len, &reg);
  if (ret != 0) {
    fprintf(stderr, "REGISTER [%#llx, +%llu): %s\n", (unsigned long long)lo,
            (unsigned long long)len, strerror(-ret));
    return -1;
  }
  unsigned char *map = phx_map(node, &reg);
  if (map == NULL) {
    fprintf(stderr, "mmap of [%#llx, +%llu): %s\n", (unsigned long long)lo, (unsigned long long)len,
            strerror(errno));
    phx_deregister(node, reg.handle);
    return -1;
  }
  if (to_device) {
    memcpy(map + (at - lo), host, size);
  } else {
    memcpy(host, map + (at - lo), size);
  }
  munmap(map, len);
  return phx_deregister(node, reg.handle) == 0 ? 0 : -1;
}

static int rig_to_host(void *host, const void *device, size_t size) {
  return rig_copy(host, device, size, 0);
}

static int rig_from_host(void *device, const void *host, size_t size) {
  return rig_copy((void *)(uintptr_t)host, device, size, 1);
}

static void rig_evidence(const void *device, size_t size, const char *path, size_t file_offset) {
  /* The host reads the file from the ext4 image: its path there. */
  const size_t skip = strlen(ext4) + 1;
  if (strncmp(path, ext4, skip - 1) == 0 && path[skip - 1] == '/') {
    vm_evidence_file(RIG_SHM, (uint64_t)(uintptr_t)device, path + skip, file_offset, size);
  }
}

static int global_in_image; /* static, non-PIE: its address is a small number */

/* x86-64 starts a static executable's heap anywhere in the GiB above its
 * image (arch_randomize_brk), so in one run out of a few hundred the heap
 * covered the BAR offsets this test uses as device pointers, and the shim
 * rightly refused them as host memory.  Without randomization the heap
 * follows the image, some 6 MiB up, far below 121 MiB. */
static void run_without_address_randomization(char **argv) {
  const int persona = personality(0xffffffff);
  if (persona == -1 || (persona & ADDR_NO_RANDOMIZE) != 0) {
    return;
  }
  if (personality((unsigned long)persona | ADDR_NO_RANDOMIZE) == -1) {
    perror("personality(ADDR_NO_RANDOMIZE)");
    return;
  }
  execv("/proc/self/exe", argv);
  perror("re-exec without address randomization");
}

/* Whether this process maps any byte of [lo, hi). */
static int mapped_between(uint64_t lo, uint64_t hi) {
  FILE *maps = fopen("/proc/self/maps", "r");
  unsigned long long start = 0;
  unsigned long long end = 0;
  int found = 0;
  char line[512];
  while (maps != NULL && !found && fgets(line, sizeof(line), maps) != NULL) {
    found = sscanf(line, "%llx-%llx", &start, &end) == 2 && start < hi && end > lo;
  }
  if (maps != NULL) {
    fclose(maps);
  }
  return found;
}

int main(int argc, char **argv) {
  (void)argc;
  run_without_address_randomization(argv);
  vm_report_open();
  ext4 = getenv("PHX_EXT4_DIR");
  if (ext4 == NULL) {
    fprintf(stderr, "PHX_EXT4_DIR is not set (run by the rig's guest.sh)\n");
    return 1;
  }
  snprintf(dir, sizeof(dir), "%s/phx", ext4);
  mkdir(dir, 0777);
  snprintf(dir, sizeof(dir), "%s/phx/cufile", ext4);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    perror(dir);
    return 1;
  }
  node = phx_open_dev(0);
  struct phxfs_info info;
  if (node < 0 || phx_get_info(node, &info) != 0 || info.provider != PHXFS_PROVIDER_PCIBAR ||
      info.bar_size < 128 * MiB) {
    fprintf(stderr, "/dev/phxfs_dev0 is not a PCI BAR device of 128 MiB or more\n");
    return 1;
  }
  if (mapped_between(RIG_BUFFER_A, 128 * MiB) ||
      mapped_between(info.bar_size - 4096, info.bar_size)) {
    fprintf(stderr,
            "test setup failed: this process maps memory at the BAR offsets it uses as "
            "device pointers ([121, 128) MiB and the BAR's last page)\n");
    return 1;
  }
  /* Host memory the shim must refuse: a page mapped high (outside the
   * BAR), and the program's own data, whose address also lies inside the
   * BAR's offsets. */
  void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  const struct cufile_platform rig = {
      .name = "phxfs PCI BAR (direct engine, no CUDA)",
      .alloc = rig_alloc,
      .release = rig_release,
      .to_host = rig_to_host,
      .from_host = rig_from_host,
      .evidence = rig_evidence,
      .dir = dir,
      .keep_file = 1,
      .edge = (const void *)(uintptr_t)(info.bar_size - 100),
      .not_device = {page == MAP_FAILED ? NULL : page,
                     (uintptr_t)&global_in_image < info.bar_size ? &global_in_image : NULL},
  };
  const int rc = cufile_client_run(&rig);
  close(node);
  return rc;
}
