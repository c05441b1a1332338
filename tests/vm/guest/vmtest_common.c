// SPDX-License-Identifier: GPL-2.0
/* vmtest_common.c - reporting, ioctl wrappers and data helpers. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vmtest.h"

static FILE *report;
static int failures;

void vm_report_open(void) {
  const char *path = getenv("PHX_REPORT");

  report = path ? fopen(path, "a") : NULL;
  if (!report)
    report = stdout;
  setvbuf(report, NULL, _IOLBF, 0);
}

static void json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;

    if (c == '"' || c == '\\')
      fprintf(out, "\\%c", c);
    else if (c < 0x20)
      fprintf(out, "\\u%04x", c);
    else
      fputc(c, out);
  }
  fputc('"', out);
}

void vm_result(const char *test, int outcome, const char *detail) {
  const char *status = outcome == 0 ? "pass" : outcome > 0 ? "skip" : "fail";

  if (outcome < 0)
    failures++;
  fprintf(report, "PHX-RESULT {\"test\":");
  json_string(report, test);
  fprintf(report, ",\"status\":\"%s\",\"detail\":", status);
  json_string(report, detail ? detail : "");
  fprintf(report, "}\n");
  fflush(report);
  /* Also on the console, for people watching the boot. */
  if (report != stdout)
    printf("%s %s %s\n", status, test, detail ? detail : "");
}

void vm_evidence_disk(int shm, uint64_t shm_off, uint64_t disk_off, uint64_t len) {
  fprintf(report,
          "PHX-EVIDENCE "
          "{\"kind\":\"shm_eq_disk\",\"shm\":%d,\"shm_off\":%llu,\"disk_off\":%llu,\"len\":%llu}\n",
          shm, (unsigned long long)shm_off, (unsigned long long)disk_off, (unsigned long long)len);
  fflush(report);
}

void vm_evidence_file(int shm, uint64_t shm_off, const char *path, uint64_t file_off,
                      uint64_t len) {
  fprintf(report,
          "PHX-EVIDENCE {\"kind\":\"shm_eq_file\",\"shm\":%d,\"shm_off\":%llu,\"path\":", shm,
          (unsigned long long)shm_off);
  json_string(report, path);
  fprintf(report, ",\"file_off\":%llu,\"len\":%llu}\n", (unsigned long long)file_off,
          (unsigned long long)len);
  fflush(report);
}

void vm_run(const char *test, vm_test_fn fn) {
  char detail[512] = "";
  int outcome = fn(detail, sizeof(detail));

  vm_result(test, outcome, detail);
}

int vm_failures(void) {
  return failures;
}

int phx_open_dev(unsigned int index) {
  char path[64];

  snprintf(path, sizeof(path), PHXFS_DEVICE_PREFIX "%u", index);
  return open(path, O_RDWR | O_CLOEXEC);
}

int phx_get_info(int fd, struct phxfs_info *info) {
  memset(info, 0, sizeof(*info));
  info->abi_version = PHXFS_ABI_VERSION;
  info->argsz = sizeof(*info);
  return ioctl(fd, PHXFS_IOC_GET_INFO, info) ? -errno : 0;
}

int phx_register(int fd, uint64_t addr, uint64_t len, struct phxfs_register *out) {
  memset(out, 0, sizeof(*out));
  out->abi_version = PHXFS_ABI_VERSION;
  out->argsz = sizeof(*out);
  out->device_addr = addr;
  out->length = len;
  return ioctl(fd, PHXFS_IOC_REGISTER, out) ? -errno : 0;
}

int phx_deregister(int fd, uint64_t handle) {
  struct phxfs_deregister args = {
      .abi_version = PHXFS_ABI_VERSION,
      .argsz = sizeof(args),
      .handle = handle,
  };

  return ioctl(fd, PHXFS_IOC_DEREGISTER, &args) ? -errno : 0;
}

void *phx_map(int fd, const struct phxfs_register *reg) {
  void *p =
      mmap(NULL, reg->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)reg->mmap_offset);

  return p == MAP_FAILED ? NULL : p;
}

/* splitmix64, so every byte of a range depends on the seed and position. */
void pattern_fill(void *buf, size_t len, uint64_t seed) {
  unsigned char *p = buf;
  uint64_t x = seed;
  size_t i;

  for (i = 0; i < len; i += 8) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    memcpy(p + i, &z, len - i < 8 ? len - i : 8);
  }
}

void *ram_alloc(size_t len) {
  void *p = NULL;

  if (posix_memalign(&p, 4096, len ? len : 4096))
    return NULL;
  return p;
}

int read_exact(int fd, void *buf, size_t len, uint64_t off) {
  size_t done = 0;

  while (done < len) {
    ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));

    if (n < 0)
      return -errno;
    if (n == 0)
      return -ENODATA;
    done += (size_t)n;
  }
  return 0;
}

int write_exact(int fd, const void *buf, size_t len, uint64_t off) {
  size_t done = 0;

  while (done < len) {
    ssize_t n = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));

    if (n < 0)
      return -errno;
    done += (size_t)n;
  }
  return 0;
}

size_t first_diff(const void *a, const void *b, size_t len) {
  const unsigned char *x = a, *y = b;
  size_t i;

  for (i = 0; i < len; i++)
    if (x[i] != y[i])
      return i;
  return len;
}

static sigjmp_buf touch_jump;

static void on_touch_signal(int sig) {
  siglongjmp(touch_jump, sig);
}

int touch_signal(volatile unsigned char *p) {
  struct sigaction sa = {.sa_handler = on_touch_signal}, old_bus, old_segv;
  int sig;

  sigaction(SIGBUS, &sa, &old_bus);
  sigaction(SIGSEGV, &sa, &old_segv);
  sig = sigsetjmp(touch_jump, 1);
  if (!sig) {
    (void)*p;
  }
  sigaction(SIGBUS, &old_bus, NULL);
  sigaction(SIGSEGV, &old_segv, NULL);
  return sig;
}

void *inflight_read(void *arg) {
  struct inflight *f = arg;

  f->result = pread(f->raw, f->map, f->size, 0);
  f->err = errno;
  return NULL;
}

struct same_mm_child {
  int (*fn)(void *);
  void *arg;
};

static int same_mm_trampoline(void *p) {
  struct same_mm_child *c = p;

  _exit(c->fn(c->arg));
}

pid_t spawn_same_mm(int (*fn)(void *), void *arg) {
  /* Stays allocated: the child may outlive the caller's frame until reaped. */
  static struct same_mm_child slots[16];
  static unsigned int next;
  const size_t stack_size = 256 * 1024;
  struct same_mm_child *c = &slots[next++ % 16];
  char *stack = malloc(stack_size);

  if (!stack)
    return -1;
  c->fn = fn;
  c->arg = arg;
  return clone(same_mm_trampoline, stack + stack_size, CLONE_VM | SIGCHLD, c);
}

int phx_set_param(const char *name, unsigned long value) {
  char path[128];
  FILE *f;

  snprintf(path, sizeof(path), PHX_PARAMS "%s", name);
  f = fopen(path, "w");
  if (!f)
    return -errno;
  fprintf(f, "%lu\n", value);
  return fclose(f) ? -errno : 0;
}

int phx_find_listed(unsigned int dev, unsigned long long handle, struct phx_listed *out) {
  FILE *f = fopen(PHX_LISTING, "r");
  char line[256];
  int found = 0;

  if (!f || !fgets(line, sizeof(line), f) || strncmp(line, "dev handle pid uid", 18)) {
    if (f)
      fclose(f);
    return -1;
  }
  while (!found && fgets(line, sizeof(line), f)) {
    struct phx_listed l;

    if (sscanf(line, "%u %llu %d %u %llx %llu %23s %15s", &l.dev, &l.handle, &l.pid, &l.uid,
               &l.addr, &l.bytes, l.state, l.pin) == 8 &&
        l.dev == dev && l.handle == handle) {
      *out = l;
      found = 1;
    }
  }
  fclose(f);
  return found;
}
