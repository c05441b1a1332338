// SPDX-License-Identifier: GPL-2.0
/*
 * fuzz_trace.c - the fuzzer's random numbers, its per-thread trace of the
 * last operations, failure reports, and memory accesses to device mappings
 * that survive a concurrent revocation (SIGBUS) or munmap (SIGSEGV).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "vmtest.h"

uint64_t fz_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t fz_rand(struct fz_thread *t) {
  t->rng += 0x9e3779b97f4a7c15ULL;
  return fz_mix(t->rng);
}

uint64_t fz_below(struct fz_thread *t, uint64_t n) {
  return n ? fz_rand(t) % n : 0;
}

void fz_trace(struct fz_thread *t, const char *op, uint64_t a, uint64_t b, uint64_t c) {
  struct fz_op_record *r = &t->trace[t->seq % FZ_TRACE];

  *r = (struct fz_op_record){.seq = t->seq, .op = op, .a = a, .b = b, .c = c, .result = 0};
  t->proc->shared->now[t->proc->id][t->id].op = op;
  t->proc->shared->now[t->proc->id][t->id].seq = t->seq;
  t->seq++;
}

void fz_trace_result(struct fz_thread *t, long result) {
  if (t->seq)
    t->trace[(t->seq - 1) % FZ_TRACE].result = result;
}

void fz_fail(struct fz_thread *t, const char *fmt, ...) {
  struct fz_shared *sh = t->proc->shared;
  char msg[512];
  size_t off;
  uint64_t i, first;
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* The first finding wins; later ones are usually its consequences. */
  if (__sync_bool_compare_and_swap(&sh->failed, 0, 1)) {
    off = (size_t)snprintf(
        sh->failure, sizeof(sh->failure),
        "seed %llu proc %u thread %u op %llu: %s; trace:", (unsigned long long)t->proc->cfg->seed,
        t->proc->id, t->id, (unsigned long long)(t->seq ? t->seq - 1 : 0), msg);
    first = t->seq > FZ_TRACE ? t->seq - FZ_TRACE : 0;
    if (t->seq - first > 16)
      first = t->seq - 16;
    for (i = first; i < t->seq && off < sizeof(sh->failure); i++) {
      const struct fz_op_record *r = &t->trace[i % FZ_TRACE];

      off += (size_t)snprintf(sh->failure + off, sizeof(sh->failure) - off,
                              " [%llu %s %#llx %#llx %#llx -> %ld]", (unsigned long long)r->seq,
                              r->op, (unsigned long long)r->a, (unsigned long long)r->b,
                              (unsigned long long)r->c, r->result);
    }
    sh->stop = 1;
  }
  fprintf(stderr, "phx-fuzz: FAIL proc %u thread %u: %s\n", t->proc->id, t->id, msg);
  _exit(1);
}

static const char *want_name(int want, char *buf, size_t len) {
  if (want == FZ_ANY)
    return "anything";
  if (want == FZ_FAILS)
    return "an error";
  if (want == 0)
    return "success";
  snprintf(buf, len, "%s", strerror(want));
  return buf;
}

void fz_expect(struct fz_thread *t, int got, int want, int alt, const char *what) {
  char a[64], b[64];

  if (want == FZ_ANY || got == want || (alt != FZ_ANY && got == alt))
    return;
  if ((want == FZ_FAILS || alt == FZ_FAILS) && got != 0)
    return;
  fz_fail(t, "%s: got %s, want %s%s%s", what, got ? strerror(got) : "success",
          want_name(want, a, sizeof(a)), alt != FZ_ANY ? " or " : "",
          alt != FZ_ANY ? want_name(alt, b, sizeof(b)) : "");
}

static __thread sigjmp_buf guard_jump;
static __thread volatile int guard_armed;

static void on_guard_signal(int sig, siginfo_t *si, void *uc) {
  (void)si;
  (void)uc;
  if (guard_armed) {
    guard_armed = 0;
    siglongjmp(guard_jump, sig);
  }
  /* Not ours: die of it, so the parent sees which signal. */
  signal(sig, SIG_DFL);
  raise(sig);
}

void fz_install_signal_guard(void) {
  struct sigaction sa = {.sa_sigaction = on_guard_signal, .sa_flags = SA_SIGINFO | SA_NODEFER};

  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGSEGV, &sa, NULL);
}

int fz_guarded_cmp(const void *device, const void *ram, size_t len, size_t *diff_at) {
  int sig = sigsetjmp(guard_jump, 1);

  if (sig)
    return sig;
  guard_armed = 1;
  *diff_at = first_diff(device, ram, len);
  guard_armed = 0;
  return 0;
}

int fz_guarded_fill(void *device, size_t len, uint64_t seed) {
  int sig = sigsetjmp(guard_jump, 1);

  if (sig)
    return sig;
  guard_armed = 1;
  pattern_fill(device, len, seed);
  guard_armed = 0;
  return 0;
}

int fz_guarded_touch(volatile const unsigned char *p) {
  int sig = sigsetjmp(guard_jump, 1);

  if (sig)
    return sig;
  guard_armed = 1;
  (void)*p;
  guard_armed = 0;
  return 0;
}
