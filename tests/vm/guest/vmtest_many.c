// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_many.c - phxfs serving every ivshmem device the rig has (at least
 * eight): each /dev/phxfs_devN reaches its own device (minor = index, PCI
 * order), and a read into each lands in that device's BAR, which the host
 * checks per shm file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "vmtest.h"
#include "vmtest_pcibar.h"

/* Devices 0 and 1 keep other groups' evidence below this offset. */
#define BIG_BAR_OFFSET (120 * MiB)

static int t_many(char *detail, size_t len) {
  const char *raw_path = getenv("PHX_RAW_DEV");
  unsigned char *ram = ram_alloc(64 * KiB);
  unsigned int n = 0, i;
  int raw;

  EXPECT(raw_path && ram, "setup");
  raw = open(raw_path, O_RDONLY | O_DIRECT);
  EXPECT(raw >= 0, "open raw");
  for (i = 0; i < PHXFS_MAX_DEVICES; i++) {
    struct phxfs_info info;
    struct phxfs_register r;
    struct stat st;
    char path[64];
    uint64_t bar_off, disk = (100 + i) * MiB;
    unsigned char *map;
    int fd;

    snprintf(path, sizeof(path), PHXFS_DEVICE_PREFIX "%u", i);
    if (stat(path, &st))
      break;
    EXPECT(S_ISCHR(st.st_mode) && minor(st.st_rdev) == i, "%s: minor %u", path, minor(st.st_rdev));
    fd = open(path, O_RDWR);
    EXPECT(fd >= 0 && !phx_get_info(fd, &info), "%s: %s", path, strerror(errno));
    EXPECT(info.device_index == i, "%s reports index %u", path, info.device_index);
    bar_off = info.bar_size > BIG_BAR_OFFSET ? BIG_BAR_OFFSET : 0;
    EXPECT(!phx_register(fd, bar_off, 64 * KiB, &r), "%s: register: %s", path, strerror(errno));
    map = phx_map(fd, &r);
    EXPECT(map, "%s: mmap", path);
    EXPECT(!read_exact(raw, map, 64 * KiB, disk) && !read_exact(raw, ram, 64 * KiB, disk) &&
               !memcmp(map, ram, 64 * KiB),
           "%s: read differs", path);
    vm_evidence_disk((int)i, bar_off, disk, 64 * KiB);
    EXPECT(!munmap(map, 64 * KiB) && !phx_deregister(fd, r.handle), "%s: teardown", path);
    close(fd);
    n++;
  }
  close(raw);
  free(ram);
  EXPECT(n >= 8, "only %u devices served", n);
  snprintf(detail, len, "%u devices, each read into its own BAR", n);
  return 0;
}

int vmtest_many(void) {
  vm_run("module/many_devices", t_many);
  return vm_failures() ? 1 : 0;
}
