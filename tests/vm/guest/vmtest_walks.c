// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_walks.c - walks over every page of a large registration (issue
 * 37, finding 6).  Registering most of the 8 GiB high BAR pins and claims
 * two million pages, and deregistering releases them, in batches under
 * the device's claim lock with the CPU offered between them.  Small
 * REGISTER/DEREGISTERs run beside, taking the same lock (as a free
 * callback's release does), and must all succeed; the soft-lockup
 * detector watches at its shortest threshold meanwhile (the rig boots with
 * softlockup_panic=1).  Their latencies are reported, not judged: on the
 * rig a whole walk takes tens of milliseconds, within the emulator's
 * scheduling noise, so no bound on them could tell a walk that yields from
 * one that does not.  t_walks_share_the_cpu() can: it judges what a walk
 * does to another task of its own CPU.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vmtest.h"
#include "vmtest_pcibar.h"

#define BIG_ROUNDS 4
#define SMALL_LEN (64 * KiB)
#define MAX_OPS 4096

static double now_s(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct big_walker {
  int fd;
  uint64_t len;
  double shortest; /* the shortest REGISTER or DEREGISTER, s */
  int err;
  volatile int done;
};

static void *big_walks(void *arg) {
  struct big_walker *w = arg;
  struct phxfs_register r;
  double start, mid, end;

  w->shortest = 1e9;
  for (int i = 0; i < BIG_ROUNDS && !w->err; i++) {
    start = now_s();
    if (phx_register(w->fd, 0, w->len, &r)) {
      w->err = errno;
      break;
    }
    mid = now_s();
    if (phx_deregister(w->fd, r.handle))
      w->err = errno;
    end = now_s();
    if (mid - start < w->shortest)
      w->shortest = mid - start;
    if (end - mid < w->shortest)
      w->shortest = end - mid;
  }
  w->done = 1;
  return NULL;
}

/* Sets /proc/sys/kernel/watchdog_thresh; returns the old value, or -1. */
static int set_watchdog_thresh(int value) {
  FILE *f = fopen("/proc/sys/kernel/watchdog_thresh", "r+");
  int old = -1;

  if (!f)
    return -1;
  if (fscanf(f, "%d", &old) != 1 || fseek(f, 0, SEEK_SET) || fprintf(f, "%d\n", value) < 0)
    old = -1;
  fclose(f);
  return old;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

/* One 64 KiB register+deregister at the BAR's end; its seconds, or -1 (errno). */
static double small_op(int fd, uint64_t bar_size) {
  struct phxfs_register r;
  double start = now_s();

  if (phx_register(fd, bar_size - SMALL_LEN, SMALL_LEN, &r) || phx_deregister(fd, r.handle))
    return -1;
  return now_s() - start;
}

int t_claim_walks_yield(char *detail, size_t len) {
  static double alone[MAX_OPS], beside[MAX_OPS];
  struct big_walker w = {0};
  struct phxfs_info info;
  int small, thresh, n_alone = 0, n_beside = 0, err = 0;
  double took;
  pthread_t th;

  w.fd = phx_open_dev(0);
  small = phx_open_dev(0);
  EXPECT(w.fd >= 0 && small >= 0 && !phx_get_info(w.fd, &info), "dev0: %s", strerror(errno));
  EXPECT(info.bar_size >= 1024 * MiB, "BAR of %llu MiB: not the large one",
         (unsigned long long)(info.bar_size / MiB));
  /* All but the last 2 MiB, where the small registrations go. */
  w.len = info.bar_size - 2 * MiB;
  for (; n_alone < 64; n_alone++) {
    took = small_op(small, info.bar_size);
    EXPECT(took >= 0, "small register/deregister: %s", strerror(errno));
    alone[n_alone] = took;
    usleep(2000);
  }
  thresh = set_watchdog_thresh(1);
  EXPECT(!pthread_create(&th, NULL, big_walks, &w), "thread");
  while (!w.done && n_beside < MAX_OPS) {
    took = small_op(small, info.bar_size);
    if (took < 0) {
      err = errno;
      break;
    }
    beside[n_beside++] = took;
    usleep(2000);
  }
  pthread_join(th, NULL);
  if (thresh > 0)
    set_watchdog_thresh(thresh);
  close(small);
  close(w.fd);
  EXPECT(!err, "small register/deregister beside: %s", strerror(err));
  EXPECT(!w.err, "register/deregister %llu MiB: %s", (unsigned long long)(w.len / MiB),
         strerror(w.err));
  EXPECT(n_beside >= 4, "only %d small registrations while the large ones ran", n_beside);
  qsort(alone, (size_t)n_alone, sizeof(double), cmp_double);
  qsort(beside, (size_t)n_beside, sizeof(double), cmp_double);
  snprintf(detail, len,
           "64 KiB register+deregister alone: median %.2f ms, worst %.2f; beside %d of %llu MiB "
           "(each %.1f ms or more): %d, median %.2f ms, 90th %.2f, worst %.2f; watchdog_thresh %s",
           alone[n_alone / 2] * 1e3, alone[n_alone - 1] * 1e3, BIG_ROUNDS,
           (unsigned long long)(w.len / MiB), w.shortest * 1e3, n_beside,
           beside[n_beside / 2] * 1e3, beside[n_beside * 9 / 10] * 1e3, beside[n_beside - 1] * 1e3,
           thresh > 0 ? "1" : "unchanged");
  return 0;
}

/*
 * The same walks, judged by how long they keep another task of their CPU
 * off it.  The walker and a spinner are pinned to one CPU.  The stock
 * kernels preempt voluntarily (only at cond_resched() and sleeps), so a
 * kernel loop that never offers the CPU keeps the spinner off it for the
 * whole loop; one that offers it between batches lets the scheduler switch
 * within a tick or two.  The spinner notes every gap of more than 1 ms in
 * its running; each REGISTER and DEREGISTER is judged by its longest gap,
 * and the run by the median over them, since an emulator stall now and
 * then also stops the spinner.
 */
#define MAX_GAPS 8192

struct spinner {
  double at[MAX_GAPS], gap[MAX_GAPS];
  volatile int n;
  volatile int stop;
};

static void pin_to_cpu0(void) {
  cpu_set_t one;

  CPU_ZERO(&one);
  CPU_SET(0, &one);
  pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
}

static void *spin(void *arg) {
  struct spinner *sp = arg;
  double last, now;

  pin_to_cpu0();
  last = now_s();
  while (!sp->stop) {
    now = now_s();
    if (now - last > 1e-3 && sp->n < MAX_GAPS) {
      sp->at[sp->n] = last;
      sp->gap[sp->n] = now - last;
      sp->n++;
    }
    last = now;
  }
  return NULL;
}

/* The longest gap of the spinner's that began within [from, to]. */
static double longest_gap(const struct spinner *sp, double from, double to) {
  double longest = 0;

  for (int i = 0; i < sp->n; i++)
    if (sp->at[i] >= from && sp->at[i] <= to && sp->gap[i] > longest)
      longest = sp->gap[i];
  return longest;
}

int t_walks_share_the_cpu(char *detail, size_t len) {
  static struct spinner sp;
  double from[2 * BIG_ROUNDS], to[2 * BIG_ROUNDS], worst[2 * BIG_ROUNDS], median;
  struct phxfs_info info;
  struct phxfs_register r;
  int fd = phx_open_dev(0), i, ops = 0, err = 0;
  char list[256];
  size_t used = 0;
  cpu_set_t mask;
  uint64_t big;
  pthread_t th;

  EXPECT(fd >= 0 && !phx_get_info(fd, &info), "dev0: %s", strerror(errno));
  EXPECT(info.bar_size >= 1024 * MiB, "BAR of %llu MiB: not the large one",
         (unsigned long long)(info.bar_size / MiB));
  big = info.bar_size - 2 * MiB;
  EXPECT(!pthread_getaffinity_np(pthread_self(), sizeof(mask), &mask), "affinity");
  pin_to_cpu0();
  memset(&sp, 0, sizeof(sp));
  EXPECT(!pthread_create(&th, NULL, spin, &sp), "thread");
  usleep(100000);
  for (; ops < 2 * BIG_ROUNDS && !err; ops++) {
    from[ops] = now_s();
    if (ops % 2 == 0 ? phx_register(fd, 0, big, &r) : phx_deregister(fd, r.handle))
      err = errno;
    to[ops] = now_s();
  }
  sp.stop = 1;
  pthread_join(th, NULL);
  pthread_setaffinity_np(pthread_self(), sizeof(mask), &mask);
  close(fd);
  EXPECT(!err, "register/deregister %llu MiB: %s", (unsigned long long)(big / MiB), strerror(err));
  EXPECT(sp.n < MAX_GAPS, "more than %d gaps", MAX_GAPS);
  for (i = 0; i < ops; i++) {
    worst[i] = longest_gap(&sp, from[i], to[i]);
    used +=
        (size_t)snprintf(list + used, sizeof(list) - used, "%s%.1f", i ? " " : "", worst[i] * 1e3);
  }
  qsort(worst, (size_t)ops, sizeof(double), cmp_double);
  median = worst[ops / 2];
  snprintf(detail, len,
           "%d REGISTER/DEREGISTERs of %llu MiB pinned to one CPU beside a spinner: the "
           "spinner's longest wait in each, ms: %s; median %.1f ms",
           ops, (unsigned long long)(big / MiB), list, median * 1e3);
  /*
   * 25 ms: two CPU-bound tasks of one CPU share it in slices, and 6.1's
   * CFS (sched_latency 12 ms with two CPUs, decided at 4 ms ticks) keeps
   * the spinner waiting 8-16 ms beside walks that yield; 6.12's EEVDF and
   * 7.2 4-10 ms.  A walk that never yields kept it off for 27-68 ms.
   */
  EXPECT(median < 0.025,
         "a walk over two million pages kept the CPU from another task for %.1f ms (median "
         "over %d: %s), want under 25 ms",
         median * 1e3, ops, list);
  return 0;
}
