// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_starved.c - a tenant who plays the scheduler (issue 54, item 1).
 * The attacker, a child process, keeps CPU 0 busy with a loop of its own
 * and runs STARVED_WALKERS threads there at SCHED_IDLE, each registering
 * and deregistering a slice of the high BAR in a loop: their walks over
 * the pages get a CPU seldom, and never when they want it.  The victim,
 * this process on CPU 1, must not wait for them: not in its small
 * REGISTER/DEREGISTERs, not in the NVIDIA free callbacks of its
 * allocations (nvemu times them), and an attacker whose own REGISTER is
 * starved must not keep the free callback of that allocation waiting.
 * A lock handed from walker to walker (phxfs's claim semaphore before the
 * claims took no lock) made each of these wait for the walkers ahead of
 * it to get a CPU: seconds.  The bound is WAIT_STARVED.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvemu_uapi.h"
#include "vmtest.h"
#include "vmtest_pcibar.h"

#define STARVED_WALKERS 64
#define VICTIM_OPS 160
/* Victims that wait for starved walkers take seconds each: stop sooner. */
#define VICTIM_SECONDS 8.0
#define VICTIM_MIN_OPS 8
#define WAIT_STARVED 0.005
/* Left at the BAR's end for the victim. */
#define VICTIM_AREA (64 * MiB)

struct attack {
  volatile int started, stop, err;
  volatile long walks;
};

struct walker {
  struct attack *a;
  int fd;
  uint64_t addr, len;
};

static int be_idle_on_cpu0(void) {
  struct sched_param none = {0};

  if (vm_pin_to_cpu(0))
    return -1;
  return sched_setscheduler(0, SCHED_IDLE, &none);
}

static void *walk_forever(void *arg) {
  struct walker *w = arg;
  struct phxfs_register r;

  if (be_idle_on_cpu0()) {
    w->a->err = errno;
    return NULL;
  }
  __atomic_add_fetch(&w->a->started, 1, __ATOMIC_SEQ_CST);
  while (!w->a->stop) {
    if (phx_register(w->fd, w->addr, w->len, &r)) {
      w->a->err = errno;
      break;
    }
    if (phx_deregister(w->fd, r.handle)) {
      w->a->err = errno;
      break;
    }
    __atomic_add_fetch(&w->a->walks, 1, __ATOMIC_SEQ_CST);
  }
  return NULL;
}

/*
 * The attacker (a forked child): STARVED_WALKERS idle-class walkers over
 * [0, @span) in equal slices, through phxfs (pcibar) or, with @emu >= 0,
 * over allocations of the emulated GPU (legacy pins); its main thread is
 * the busy loop on CPU 0.  Never returns.
 */
static void attacker(struct attack *a, int emu, uint64_t span) {
  static struct walker w[STARVED_WALKERS];
  static pthread_t th[STARVED_WALKERS];
  uint64_t slice = (span / STARVED_WALKERS) & ~(2 * MiB - 1);
  int fd = phx_open_dev(0), n = 0;

  if (fd < 0 || vm_pin_to_cpu(0)) {
    a->err = errno;
    _exit(1);
  }
  for (; n < STARVED_WALKERS; n++) {
    w[n] = (struct walker){.a = a, .fd = fd, .addr = (uint64_t)n * slice, .len = slice};
    if (emu >= 0) {
      struct nvemu_alloc alloc = {.length = slice};

      if (ioctl(emu, NVEMU_IOC_ALLOC, &alloc)) {
        a->err = errno;
        break;
      }
      w[n].addr = alloc.va;
    }
    if (pthread_create(&th[n], NULL, walk_forever, &w[n])) {
      a->err = EAGAIN;
      break;
    }
  }
  while (!a->stop && !a->err)
    ; /* the busy loop */
  a->stop = 1;
  while (n--)
    pthread_join(th[n], NULL);
  _exit(a->err ? 1 : 0);
}

struct victim_run {
  struct attack *a;
  pid_t child;
  cpu_set_t mask;
};

/* Starts the attacker and waits until every walker is in its loop. */
static int start_attack(struct victim_run *v, int emu, uint64_t span, char *detail, size_t len) {
  v->a = mmap(NULL, sizeof(*v->a), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT(v->a != MAP_FAILED, "mmap");
  memset((void *)v->a, 0, sizeof(*v->a));
  EXPECT(!pthread_getaffinity_np(pthread_self(), sizeof(v->mask), &v->mask) && !vm_pin_to_cpu(1),
         "affinity: %s", strerror(errno));
  v->child = fork();
  EXPECT(v->child >= 0, "fork: %s", strerror(errno));
  if (!v->child)
    attacker(v->a, emu, span);
  for (int i = 0; i < 1000 && v->a->started < STARVED_WALKERS && !v->a->err; i++)
    usleep(10000);
  /* In their walks by now, or queued for what the walks take. */
  usleep(200000);
  return 0;
}

/* Stops the attacker; 0 if it ran as meant, else -1 with @detail set. */
static int stop_attack(struct victim_run *v, long *walks, char *detail, size_t len) {
  int status = -1, started = v->a->started, err = v->a->err;

  v->a->stop = 1;
  waitpid(v->child, &status, 0);
  *walks = v->a->walks;
  pthread_setaffinity_np(pthread_self(), sizeof(v->mask), &v->mask);
  munmap((void *)v->a, sizeof(*v->a));
  EXPECT(started == STARVED_WALKERS, "%d of %d walkers started: %s", started, STARVED_WALKERS,
         strerror(err));
  EXPECT(!err && WIFEXITED(status) && !WEXITSTATUS(status), "the attacker: %s (status %#x)",
         strerror(err), status);
  return 0;
}

/*
 * Judged by the 90th percentile: a victim waits only when it meets a
 * handoff queue, which a module with one had for a tenth or more of the
 * victim's operations (seconds each) and a median can miss.
 */
static int judge(const char *what, double *took, int n, long walks, char *detail, size_t len) {
  double median, p90;

  qsort(took, (size_t)n, sizeof(double), vm_cmp_double);
  median = took[n / 2];
  p90 = took[n * 9 / 10];
  snprintf(detail, len,
           "%s beside %d SCHED_IDLE walkers starved by a busy loop on their CPU (%ld walks "
           "meanwhile): %d, median %.2f ms, 90th percentile %.2f, worst %.2f",
           what, STARVED_WALKERS, walks, n, median * 1e3, p90 * 1e3, took[n - 1] * 1e3);
  EXPECT(p90 < WAIT_STARVED,
         "%s beside %d starved walkers: 90th percentile %.1f ms (median %.2f, worst %.1f, %d "
         "operations), want under %.0f ms: they waited for walkers that cannot get a CPU",
         what, STARVED_WALKERS, p90 * 1e3, median * 1e3, took[n - 1] * 1e3, n, WAIT_STARVED * 1e3);
  return 0;
}

int t_starved_walkers_beside_register(char *detail, size_t len) {
  static double took[VICTIM_OPS];
  struct phxfs_info info;
  struct phxfs_register r;
  struct victim_run v;
  int fd = phx_open_dev(0), n = 0, err = 0;
  long walks;
  double start, deadline;

  EXPECT(fd >= 0 && !phx_get_info(fd, &info), "dev0: %s", strerror(errno));
  EXPECT(info.bar_size >= 1024 * MiB, "BAR of %llu MiB: not the large one",
         (unsigned long long)(info.bar_size / MiB));
  if (start_attack(&v, -1, info.bar_size - VICTIM_AREA, detail, len))
    return -1;
  deadline = vm_now_s() + VICTIM_SECONDS;
  for (; n < VICTIM_OPS && !v.a->err && vm_now_s() < deadline; n++) {
    start = vm_now_s();
    if (phx_register(fd, info.bar_size - 64 * KiB, 64 * KiB, &r) || phx_deregister(fd, r.handle)) {
      err = errno;
      break;
    }
    took[n] = vm_now_s() - start;
    usleep(2000);
  }
  close(fd);
  if (stop_attack(&v, &walks, detail, len))
    return -1;
  EXPECT(!err, "the victim's register/deregister %d: %s", n, strerror(err));
  EXPECT(n >= VICTIM_MIN_OPS,
         "only %d 64 KiB register+deregisters in %.0f s beside %d starved walkers: each waited "
         "for walkers that cannot get a CPU",
         n, VICTIM_SECONDS, STARVED_WALKERS);
  return judge("a 64 KiB register+deregister", took, n, walks, detail, len);
}

int t_starved_walkers_beside_callbacks(char *detail, size_t len) {
  static struct small_reg pool[VICTIM_OPS];
  static double took[VICTIM_OPS];
  struct victim_run v;
  struct phxfs_info info;
  int emu = open("/dev/nvemu", O_RDWR), fd = phx_open_dev(0), n_pool = 0, n = 0, err = 0;
  double deadline;
  long walks;

  EXPECT(emu >= 0 && fd >= 0 && !phx_get_info(fd, &info), "open /dev/nvemu and dev0: %s",
         strerror(errno));
  for (; n_pool < VICTIM_OPS; n_pool++)
    EXPECT(!emu_small_register(emu, fd, &pool[n_pool]), "register 64 KiB allocation %d: %s", n_pool,
           strerror(errno));
  if (start_attack(&v, emu, info.bar_size - VICTIM_AREA, detail, len))
    return -1;
  deadline = vm_now_s() + VICTIM_SECONDS;
  for (; n < VICTIM_OPS && !v.a->err && vm_now_s() < deadline; n++) {
    took[n] = emu_timed_free(emu, &pool[n]);
    if (took[n] < 0) {
      err = errno;
      break;
    }
    usleep(2000);
  }
  if (stop_attack(&v, &walks, detail, len))
    return -1;
  for (int i = 0; i < n_pool; i++)
    if (phx_deregister(fd, pool[i].r.handle) && !err)
      err = errno;
  close(fd);
  close(emu);
  EXPECT(!err, "cudaFree %d of a registered 64 KiB, or a deregister: %s", n, strerror(err));
  EXPECT(n >= VICTIM_MIN_OPS,
         "only %d cudaFrees of a registered 64 KiB in %.0f s beside %d starved walkers: each "
         "callback waited for walkers that cannot get a CPU",
         n, VICTIM_SECONDS, STARVED_WALKERS);
  return judge("the free callback of a 64 KiB legacy pin", took, n, walks, detail, len);
}

/*
 * An attacker's own REGISTER of a large allocation, starved as above,
 * and a cudaFree of that allocation from its thread on another CPU once
 * the driver pinned it: the free callback (which runs inside the driver's
 * free path, holding up everyone's) must not wait for the REGISTER.
 */
#define OWN_ROUNDS 3

struct own_register {
  int fd, err, done;
  uint64_t va, len;
  struct phxfs_register r;
  double returned;
};

static void *register_idle(void *arg) {
  struct own_register *o = arg;

  if (be_idle_on_cpu0())
    o->err = errno;
  else if (phx_register(o->fd, o->va, o->len, &o->r))
    o->err = errno;
  o->returned = vm_now_s();
  __atomic_store_n(&o->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void *spin_until(void *arg) {
  volatile int *stop = arg;

  if (!vm_pin_to_cpu(0))
    while (!*stop)
      ;
  return NULL;
}

int t_starved_register_beside_its_free(char *detail, size_t len) {
  double took[OWN_ROUNDS], freed_at;
  struct phxfs_info info;
  struct nvemu_stats before, now;
  int emu = open("/dev/nvemu", O_RDWR), fd = phx_open_dev(0), during = 0, failed = 0, round;
  volatile int stop = 0;
  pthread_t spinner;
  cpu_set_t mask;

  EXPECT(emu >= 0 && fd >= 0 && !phx_get_info(fd, &info), "open /dev/nvemu and dev0: %s",
         strerror(errno));
  EXPECT(!pthread_getaffinity_np(pthread_self(), sizeof(mask), &mask) && !vm_pin_to_cpu(1),
         "affinity: %s", strerror(errno));
  EXPECT(!pthread_create(&spinner, NULL, spin_until, (void *)&stop), "thread");
  for (round = 0; round < OWN_ROUNDS; round++) {
    struct nvemu_alloc a = {.length = info.bar_size / 32};
    struct own_register o = {.fd = fd};
    struct nvemu_free f;
    pthread_t th;

    if (ioctl(emu, NVEMU_IOC_ALLOC, &a) || ioctl(emu, NVEMU_IOC_STATS, &before))
      break;
    o.va = a.va;
    o.len = a.length;
    if (pthread_create(&th, NULL, register_idle, &o))
      break;
    /* The driver has pinned it: the REGISTER is in its walks now. */
    do {
      usleep(500);
      if (ioctl(emu, NVEMU_IOC_STATS, &now))
        break;
    } while (now.legacy_pins == before.legacy_pins && !__atomic_load_n(&o.done, __ATOMIC_SEQ_CST));
    f.va = a.va;
    freed_at = vm_now_s();
    if (ioctl(emu, NVEMU_IOC_FREE, &f) || ioctl(emu, NVEMU_IOC_STATS, &now))
      break;
    pthread_join(th, NULL);
    /* Judged where the cudaFree came while the REGISTER ran. */
    if (o.returned > freed_at && now.callbacks > before.callbacks)
      took[during++] = (double)now.last_callback_ns / 1e9;
    failed += o.err != 0;
    if (!o.err)
      phx_deregister(fd, o.r.handle);
  }
  stop = 1;
  pthread_join(spinner, NULL);
  pthread_setaffinity_np(pthread_self(), sizeof(mask), &mask);
  close(fd);
  close(emu);
  EXPECT(round == OWN_ROUNDS, "round %d: %s", round, strerror(errno));
  EXPECT(during > 0, "no cudaFree came while its REGISTER ran (%d rounds): nothing judged",
         OWN_ROUNDS);
  qsort(took, (size_t)during, sizeof(double), vm_cmp_double);
  snprintf(detail, len,
           "a starved REGISTER of %llu MiB and the cudaFree of it from a thread on another CPU, "
           "%d rounds, %d freed while the REGISTER ran (%d REGISTERs failed, EFAULT): their "
           "free callbacks' median %.2f ms, worst %.2f",
           (unsigned long long)(info.bar_size / 32 / MiB), OWN_ROUNDS, during, failed,
           took[during / 2] * 1e3, took[during - 1] * 1e3);
  EXPECT(took[during / 2] < WAIT_STARVED,
         "the free callback of an allocation whose starved REGISTER was under way typically "
         "took %.1f ms, want under %.0f ms: it waited for the REGISTER",
         took[during / 2] * 1e3, WAIT_STARVED * 1e3);
  return 0;
}
