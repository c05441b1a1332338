// SPDX-License-Identifier: GPL-2.0
/* fault_common.c - clock, random numbers and signal-guarded accesses. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"

void fault_fail(struct fault_failure *f, const char *fmt, ...) {
  va_list ap;

  if (atomic_exchange(&f->failed, 1))
    return;
  va_start(ap, fmt);
  vsnprintf(f->text, sizeof(f->text), fmt, ap);
  va_end(ap);
  atomic_store(&f->stop, 1);
}

double fault_now(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t fault_below(uint64_t *state, uint64_t n) {
  uint64_t x = (*state += 0x9e3779b97f4a7c15ULL);

  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return (x ^ (x >> 31)) % n;
}

/* One jump buffer per thread; the handler is process-wide. */
static __thread sigjmp_buf guard_jump;
static __thread volatile sig_atomic_t guard_armed;

static void on_guard_signal(int sig) {
  if (guard_armed)
    siglongjmp(guard_jump, sig);
  signal(sig, SIG_DFL);
  raise(sig);
}

void fault_install_guard(void) {
  struct sigaction sa;

  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_guard_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGSEGV, &sa, NULL);
}

int fault_guarded_touch(volatile const unsigned char *p) {
  int sig = sigsetjmp(guard_jump, 1);

  if (!sig) {
    guard_armed = 1;
    (void)*p;
  }
  guard_armed = 0;
  return sig;
}

int fault_guarded_cmp(const unsigned char *device, const unsigned char *ram, size_t len,
                      size_t *diff_at) {
  volatile size_t i = 0;
  int sig = sigsetjmp(guard_jump, 1);

  *diff_at = len;
  if (!sig) {
    guard_armed = 1;
    for (i = 0; i < len; i++) {
      if (((volatile const unsigned char *)device)[i] != ram[i]) {
        *diff_at = i;
        break;
      }
    }
  }
  guard_armed = 0;
  return sig;
}

int fault_wait_idle(int fd, struct phxfs_info *info) {
  for (int i = 0; i < 1000; i++) {
    if (phx_get_info(fd, info) == 0 && info->regs_live == 0 && info->pages_mapped == 0)
      return 0;
    usleep(10000);
  }
  return -1;
}
