// SPDX-License-Identifier: GPL-2.0
/*
 * phx-fuzz: seeded random syscall sequences against /dev/phxfs_devN from
 * several processes and threads; reports one result in the rig's protocol.
 *
 *   phx-fuzz --devices 4,5,6,7 [--seed S] [--ops N] [--threads T]
 *            [--procs P] [--duration SECONDS] [--window-lo BYTES]
 *            [--raw PATH] [--scratch DIR] [--name TEST]
 *
 * Every thread's sequence of operations and arguments follows from the seed;
 * the interleaving does not, so a failing seed reproduces the same mix, not
 * always the same schedule.  On a finding it reports the seed, the message
 * and the failing thread's last operations.  After every process has exited
 * each device must be back to zero live registrations and mapped pages.
 * Exit status: 0 pass, 1 finding, 2 usage or setup error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "vmtest.h"

/* A worker that has not finished this long after the deadline is hung. */
#define FZ_GRACE_S 60.0

static double now_s(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(void) {
  fprintf(stderr,
          "usage: phx-fuzz --devices I,J,... [--seed S] [--ops N] [--threads T] [--procs P]\n"
          "                [--duration SECONDS] [--window-lo BYTES] [--raw PATH] [--scratch DIR]\n"
          "                [--name TEST]\n");
  exit(2);
}

static void parse_devices(struct fz_config *cfg, const char *list) {
  char *copy = strdup(list), *tok, *save = NULL;

  for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (cfg->ndev == FZ_MAX_DEVICES)
      usage();
    cfg->dev[cfg->ndev++].index = (unsigned int)strtoul(tok, NULL, 0);
  }
  free(copy);
}

static void parse(struct fz_config *cfg, int argc, char **argv) {
  uint64_t lo = 1 * MiB;
  int i;

  *cfg = (struct fz_config){.seed = 1,
                            .threads = 3,
                            .procs = 2,
                            .duration = 10,
                            .raw_path = getenv("PHX_RAW_DEV"),
                            .scratch_dir = getenv("PHX_EXT4_DIR"),
                            .name = "fuzz/run"};
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

    if (!strcmp(a, "-v")) {
      cfg->verbose = true;
      continue;
    }
    if (!v)
      usage();
    i++;
    if (!strcmp(a, "--seed"))
      cfg->seed = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--ops"))
      cfg->ops = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--threads"))
      cfg->threads = (unsigned int)strtoul(v, NULL, 0);
    else if (!strcmp(a, "--procs"))
      cfg->procs = (unsigned int)strtoul(v, NULL, 0);
    else if (!strcmp(a, "--duration"))
      cfg->duration = strtod(v, NULL);
    else if (!strcmp(a, "--devices"))
      parse_devices(cfg, v);
    else if (!strcmp(a, "--window-lo"))
      lo = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--raw"))
      cfg->raw_path = v;
    else if (!strcmp(a, "--scratch"))
      cfg->scratch_dir = v;
    else if (!strcmp(a, "--name"))
      cfg->name = v;
    else
      usage();
  }
  if (!cfg->ndev || !cfg->raw_path || !cfg->threads || cfg->threads > FZ_MAX_THREADS ||
      !cfg->procs || cfg->procs > FZ_MAX_PROCS || cfg->duration <= 0)
    usage();
  if (!cfg->scratch_dir)
    cfg->scratch_dir = "/tmp";
  for (i = 0; i < (int)cfg->ndev; i++)
    cfg->dev[i].lo = lo;
}

/* Fills bar_size and page_size from GET_INFO; the window must hold a few registrations. */
static int probe_devices(struct fz_config *cfg, char *why, size_t len) {
  unsigned int i;

  for (i = 0; i < cfg->ndev; i++) {
    struct fz_device *d = &cfg->dev[i];
    struct phxfs_info info;
    int fd = phx_open_dev(d->index), ret;

    if (fd < 0) {
      snprintf(why, len, "open %s%u: %s", PHXFS_DEVICE_PREFIX, d->index, strerror(errno));
      return -1;
    }
    ret = phx_get_info(fd, &info);
    close(fd);
    if (ret || info.provider != PHXFS_PROVIDER_PCIBAR) {
      snprintf(why, len, "dev%u: GET_INFO %s, provider %u (pcibar devices only)", d->index,
               strerror(-ret), info.provider);
      return -1;
    }
    d->bar_size = info.bar_size;
    d->page_size = info.page_size;
    if (d->lo % d->page_size || d->lo + 64 * (uint64_t)d->page_size > d->bar_size) {
      snprintf(why, len, "dev%u: window [%llu, %llu) too small", d->index,
               (unsigned long long)d->lo, (unsigned long long)d->bar_size);
      return -1;
    }
  }
  return 0;
}

struct thread_start {
  struct fz_thread t;
  double deadline;
  pthread_t tid;
};

static void *thread_main(void *arg) {
  struct thread_start *ts = arg;
  struct fz_thread *t = &ts->t;
  struct fz_shared *sh = t->proc->shared;
  const struct fz_config *cfg = t->proc->cfg;

  sh->now[t->proc->id][t->id].tid = gettid();
  while (!sh->stop && (!cfg->ops || t->seq < cfg->ops) && now_s() < ts->deadline) {
    fz_step(t);
    __sync_fetch_and_add(&sh->ops_done, 1);
  }
  return NULL;
}

static void worker(const struct fz_config *cfg, struct fz_shared *sh, unsigned int id,
                   double deadline) {
  static struct fz_proc proc;
  struct thread_start *ts = calloc(cfg->threads, sizeof(*ts));
  char path[512];
  unsigned int i;
  int scratch, s;
  bool tidy = fz_mix(cfg->seed ^ (0x7100ULL + id)) & 1;

  proc.cfg = cfg;
  proc.shared = sh;
  proc.id = id;
  pthread_mutex_init(&proc.lock, NULL);
  for (s = 0; s < FZ_MAX_SLOTS; s++) {
    pthread_mutex_init(&proc.slots[s].map_lock, NULL);
  }
  snprintf(path, sizeof(path), "%s/phx-fuzz-%d.bin", cfg->scratch_dir, (int)getpid());
  scratch = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (!ts || scratch < 0 || ftruncate(scratch, (off_t)cfg->threads * FZ_SCRATCH_PER_THREAD)) {
    fprintf(stderr, "phx-fuzz: scratch %s: %s\n", path, strerror(errno));
    _exit(2);
  }
  unlink(path);
  proc.devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  {
    /*
     * Closed descriptors stay taken by /dev/null, one per close: a 30 s
     * seed on a fast kernel closes more than the guest's 4096 (EMFILE at
     * op 24808 of soak seed 2007 on 6.1).  Root may raise the hard limit.
     */
    struct rlimit rl = {.rlim_cur = FZ_MAX_FDS, .rlim_max = FZ_MAX_FDS};

    if (setrlimit(RLIMIT_NOFILE, &rl) && !getrlimit(RLIMIT_NOFILE, &rl)) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  fz_install_signal_guard();
  for (i = 0; i < cfg->threads; i++) {
    struct fz_thread *t = &ts[i].t;

    t->proc = &proc;
    t->id = i;
    t->rng = fz_mix(cfg->seed * 1000003ULL + id * 131ULL + i);
    t->raw = open(cfg->raw_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    t->scratch = scratch;
    t->scratch_off = (uint64_t)i * FZ_SCRATCH_PER_THREAD;
    t->ram = ram_alloc(FZ_IO_MAX);
    t->ram2 = ram_alloc(FZ_IO_MAX);
    t->ring = calloc(1, sizeof(struct io_uring));
    if (t->raw < 0 || !t->ram || !t->ram2 || !t->ring) {
      fprintf(stderr, "phx-fuzz: thread setup: %s\n", strerror(errno));
      _exit(2);
    }
    if (io_uring_queue_init(8, t->ring, 0)) {
      free(t->ring);
      t->ring = NULL;
    }
    ts[i].deadline = deadline;
  }
  for (i = 0; i < cfg->threads; i++)
    if (pthread_create(&ts[i].tid, NULL, thread_main, &ts[i]))
      _exit(2);
  for (i = 0; i < cfg->threads; i++)
    pthread_join(ts[i].tid, NULL);
  /* Half the workers leave everything live: exit must tear it all down. */
  fz_thread_cleanup(&ts[0].t, tidy);
  _exit(0);
}

/* A hang: say which operation each thread is in and where its kernel stack is. */
static void describe_hang(const struct fz_config *cfg, struct fz_shared *sh, const pid_t *pids) {
  size_t off = strlen(sh->failure);
  unsigned int p, i;

  for (p = 0; p < cfg->procs; p++) {
    if (!pids[p])
      continue;
    for (i = 0; i < cfg->threads; i++) {
      char path[96], stack[2048] = "";
      FILE *f;
      size_t n = 0;

      snprintf(path, sizeof(path), "/proc/%d/task/%d/stack", (int)pids[p], sh->now[p][i].tid);
      f = fopen(path, "r");
      if (f) {
        n = fread(stack, 1, sizeof(stack) - 1, f);
        fclose(f);
      }
      stack[n] = 0;
      fprintf(stderr,
              "phx-fuzz: hung proc %u thread %u (tid %d) in op %llu %s; kernel stack:\n%s\n", p, i,
              sh->now[p][i].tid, (unsigned long long)sh->now[p][i].seq,
              sh->now[p][i].op ? sh->now[p][i].op : "-", stack);
      for (char *c = stack; *c; c++)
        if (*c == '\n')
          *c = '|';
      off += (size_t)snprintf(
          sh->failure + off, off < sizeof(sh->failure) ? sizeof(sh->failure) - off : 0,
          "; proc %u thread %u in %s (waiting for %s): %.160s", p, i,
          sh->now[p][i].op ? sh->now[p][i].op : "-",
          sh->now[p][i].waiting ? sh->now[p][i].waiting : "no fuzzer lock", stack);
      if (off >= sizeof(sh->failure))
        return;
    }
  }
}

/* After every process is gone the module must hold nothing: counters back to zero. */
static int check_idle(const struct fz_config *cfg, char *why, size_t len) {
  unsigned int i;

  for (i = 0; i < cfg->ndev; i++) {
    struct phxfs_info info;
    int fd = phx_open_dev(cfg->dev[i].index), tries;

    if (fd < 0) {
      snprintf(why, len, "reopen dev%u: %s", cfg->dev[i].index, strerror(errno));
      return -1;
    }
    /* Deferred teardowns (a killed DEREGISTER waiter) finish in a work item. */
    for (tries = 0; tries < 100; tries++) {
      if (phx_get_info(fd, &info) || (!info.regs_live && !info.pages_mapped))
        break;
      usleep(100000);
    }
    close(fd);
    if (info.regs_live || info.pages_mapped) {
      snprintf(why, len, "dev%u after all processes exited: regs_live %llu pages_mapped %llu",
               cfg->dev[i].index, (unsigned long long)info.regs_live,
               (unsigned long long)info.pages_mapped);
      return -1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  struct fz_config cfg;
  struct fz_shared *sh;
  pid_t pids[FZ_MAX_PROCS];
  unsigned int i, alive, killed = 0, victim;
  double start, deadline, kill_at;
  char why[512] = "";
  struct stat st;
  int raw, status, hung = 0;

  parse(&cfg, argc, argv);
  vm_report_open();
  fprintf(stderr, "phx-fuzz: %s seed %llu, %u procs x %u threads, %.0f s, ops %llu\n", cfg.name,
          (unsigned long long)cfg.seed, cfg.procs, cfg.threads, cfg.duration,
          (unsigned long long)cfg.ops);
  if (probe_devices(&cfg, why, sizeof(why))) {
    vm_result(cfg.name, -1, why);
    return 2;
  }
  raw = open(cfg.raw_path, O_RDONLY);
  if (raw < 0 || fstat(raw, &st) ||
      (S_ISBLK(st.st_mode) ? ioctl(raw, BLKGETSIZE64, &fz_raw_size)
                           : (fz_raw_size = (uint64_t)st.st_size, 0)) ||
      fz_raw_size < 16 * MiB) {
    snprintf(why, sizeof(why), "raw %s: %s", cfg.raw_path, strerror(errno));
    vm_result(cfg.name, -1, why);
    return 2;
  }
  close(raw);
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED)
    return 2;
  memset(sh, 0, sizeof(*sh));
  start = now_s();
  deadline = start + cfg.duration;
  /* Some seeds SIGKILL one worker mid-run: exit with registrations, mappings and I/O live. */
  victim = (unsigned int)(fz_mix(cfg.seed ^ 0xdeadULL) % (cfg.procs * 2));
  kill_at = start + cfg.duration * (0.2 + 0.6 * (double)(fz_mix(cfg.seed) % 1000) / 1000.0);
  for (i = 0; i < cfg.procs; i++) {
    pids[i] = fork();
    if (pids[i] < 0)
      return 2;
    if (pids[i] == 0)
      worker(&cfg, sh, i, deadline);
  }
  for (alive = cfg.procs; alive;) {
    pid_t pid = waitpid(-1, &status, WNOHANG);

    if (pid > 0) {
      for (i = 0; i < cfg.procs; i++) {
        if (pids[i] != pid)
          continue;
        pids[i] = 0;
        alive--;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
          break;
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && (killed || hung))
          break;
        if (!sh->failed && __sync_bool_compare_and_swap(&sh->failed, 0, 1))
          snprintf(sh->failure, sizeof(sh->failure), "seed %llu: worker %u ended with status %#x",
                   (unsigned long long)cfg.seed, i, status);
      }
      continue;
    }
    if (victim < cfg.procs && !killed && pids[victim] && now_s() >= kill_at) {
      kill(pids[victim], SIGKILL);
      killed = 1;
    }
    if (now_s() > deadline + FZ_GRACE_S && !hung) {
      hung = 1;
      if (!sh->failed)
        snprintf(sh->failure, sizeof(sh->failure),
                 "seed %llu: workers still running %.0f s after the deadline",
                 (unsigned long long)cfg.seed, FZ_GRACE_S);
      describe_hang(&cfg, sh, pids);
      for (i = 0; i < cfg.procs; i++)
        if (pids[i])
          kill(pids[i], SIGKILL);
    }
    usleep(20000);
  }
  if (sh->failed || hung) {
    fprintf(stderr, "phx-fuzz: FINDING %s\n", sh->failure);
    vm_result(cfg.name, -1, sh->failure);
    return 1;
  }
  if (check_idle(&cfg, why, sizeof(why))) {
    fprintf(stderr, "phx-fuzz: FINDING seed %llu: %s\n", (unsigned long long)cfg.seed, why);
    snprintf(sh->failure, sizeof(sh->failure), "seed %llu: %s", (unsigned long long)cfg.seed, why);
    vm_result(cfg.name, -1, sh->failure);
    return 1;
  }
  snprintf(
      why, sizeof(why),
      "seed %llu: %llu ops in %.1f s, %u procs x %u threads on %u devices%s; counters back to zero",
      (unsigned long long)cfg.seed, (unsigned long long)sh->ops_done, now_s() - start, cfg.procs,
      cfg.threads, cfg.ndev, killed ? ", one worker SIGKILLed mid-run" : "");
  vm_result(cfg.name, 0, why);
  return 0;
}
