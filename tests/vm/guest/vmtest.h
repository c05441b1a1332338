/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vmtest.h - helpers shared by the guest test programs: result reporting in
 * the rig's protocol, phxfs ioctl wrappers, patterns and disk layout.
 */
#ifndef VMTEST_H
#define VMTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "phxfs_ioctl.h"

#define KiB (1024ULL)
#define MiB (1024ULL * 1024ULL)

/* A test body returns 0 (pass), 1 (skip) or -1 (fail) and fills detail. */
typedef int (*vm_test_fn)(char *detail, size_t len);

void vm_report_open(void);
void vm_result(const char *test, int outcome, const char *detail);
void vm_evidence_disk(int shm, uint64_t shm_off, uint64_t disk_off, uint64_t len);
void vm_evidence_file(int shm, uint64_t shm_off, const char *path, uint64_t file_off, uint64_t len);
void vm_run(const char *test, vm_test_fn fn);
int vm_failures(void);

int phx_open_dev(unsigned int index);
int phx_get_info(int fd, struct phxfs_info *info);
int phx_register(int fd, uint64_t addr, uint64_t len, struct phxfs_register *out);
int phx_deregister(int fd, uint64_t handle);
void *phx_map(int fd, const struct phxfs_register *reg);

#define PHX_LISTING "/proc/driver/phxfs"
#define PHX_PARAMS "/sys/module/phxfs/parameters/"
/* Writes phxfs's module parameter @name; 0 or -errno. */
int phx_set_param(const char *name, unsigned long value);
/* One line of the listing. */
struct phx_listed {
  unsigned int dev;
  unsigned long long handle, addr, bytes;
  int pid;
  unsigned int uid;
  char state[24], pin[16];
};
/*
 * Looks for the registration @handle of device @dev in PHX_LISTING; fills
 * @out.  Returns 1 when listed, 0 when not, -1 when the listing cannot be
 * read or has no header.
 */
int phx_find_listed(unsigned int dev, unsigned long long handle, struct phx_listed *out);

void pattern_fill(void *buf, size_t len, uint64_t seed);
void *ram_alloc(size_t len);
int read_exact(int fd, void *buf, size_t len, uint64_t off);
int write_exact(int fd, const void *buf, size_t len, uint64_t off);
size_t first_diff(const void *a, const void *b, size_t len);

/*
 * Runs fn(arg) in a child process that shares the caller's mm (clone with
 * CLONE_VM, not a thread): a registration belongs to its mm, so such a
 * child may deregister the caller's registrations, and it can be
 * SIGKILLed or waited for alone.  Returns its pid or -1.
 */
pid_t spawn_same_mm(int (*fn)(void *), void *arg);

/* Reads one byte at p; returns the signal that raised (SIGBUS, SIGSEGV) or 0. */
int touch_signal(volatile unsigned char *p);

/* One O_DIRECT pread of size bytes at offset 0 into map, run on a thread. */
struct inflight {
  int raw;
  unsigned char *map;
  uint64_t size;
  ssize_t result;
  int err;
};
void *inflight_read(void *arg);

#define FAILF(...)                      \
  do {                                  \
    snprintf(detail, len, __VA_ARGS__); \
    return -1;                          \
  } while (0)

#define EXPECT(cond, ...) \
  do {                    \
    if (!(cond))          \
      FAILF(__VA_ARGS__); \
  } while (0)

#endif
