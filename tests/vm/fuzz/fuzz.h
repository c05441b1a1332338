/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fuzz.h - phx-fuzz: seeded random syscall sequences against /dev/phxfs_devN.
 *
 * Each worker process owns a table of open files and registrations shared by
 * its threads.  A thread picks a random operation, snapshots what it needs
 * from the table under the process lock, runs the syscall without the lock
 * (so operations race for real), then checks the result against what the
 * ABI promises.  A result is checked strictly only when nothing it depends on
 * changed meanwhile (generation counters); otherwise the run only has to
 * survive it.
 */
#ifndef PHX_FUZZ_H
#define PHX_FUZZ_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define FZ_MAX_DEVICES 8
#define FZ_MAX_FILES 6
/* Descriptors a fuzzed process may hold: closed ones stay taken (op_close). */
#define FZ_MAX_FDS (1 << 18)
#define FZ_MAX_SLOTS 12
#define FZ_TRACE 48
#define FZ_IO_MAX (256 * 1024)
/* Bytes of the scratch file each thread owns. */
#define FZ_SCRATCH_PER_THREAD (1024 * 1024)
#define FZ_MAX_PROCS 16
#define FZ_MAX_THREADS 16
/* Registrations published for other processes to abuse. */
#define FZ_SHARED_HANDLES 64

/* Expectation of a syscall result, as an errno (0: success). */
#define FZ_ANY (-1)   /* unchecked: only survival counts */
#define FZ_FAILS (-2) /* any error, but not success */

struct fz_device {
  unsigned int index;
  uint64_t bar_size;
  uint32_t page_size;
  /* Registrations that may succeed lie in [lo, bar_size); lower bytes belong to other groups. */
  uint64_t lo;
};

struct fz_config {
  uint64_t seed;
  uint64_t ops; /* per thread; 0: until the duration ends */
  unsigned int threads;
  unsigned int procs;
  double duration;
  unsigned int ndev;
  struct fz_device dev[FZ_MAX_DEVICES];
  const char *raw_path;
  const char *scratch_dir;
  const char *name;
  bool verbose;
};

struct fz_file {
  bool used;
  int fd;
  bool rdonly;      /* opened O_RDONLY: no writable mappings */
  unsigned int dev; /* index into fz_config.dev */
  uint32_t gen;     /* bumped when the file is closed */
};

struct fz_slot {
  /* Held while using, changing or checking map and its bytes. */
  pthread_mutex_t map_lock;
  bool used;
  bool registered; /* no DEREGISTER issued, file not closed */
  int file;        /* index into files */
  int fd;
  unsigned int dev;
  uint32_t file_gen;
  uint32_t gen; /* bumped on DEREGISTER and close */
  uint64_t handle;
  uint64_t mmap_off;
  uint64_t len;
  uint64_t dev_addr;
  unsigned char *map; /* NULL while unmapped */
  int prot;
  bool dofork; /* MADV_DOFORK was applied */
  bool rdonly; /* its file was opened O_RDONLY */
};

/* Memory shared by every process of a run (MAP_SHARED | MAP_ANONYMOUS). */
struct fz_shared {
  volatile int failed;
  volatile int stop;
  volatile uint64_t ops_done;
  char failure[4096];
  /* What each thread is doing now, for the report on a hang. */
  struct {
    const char *volatile op;
    volatile uint64_t seq;
    volatile int tid;
    const char *volatile waiting; /* the fuzzer's own lock it waits for, if any */
  } now[FZ_MAX_PROCS][FZ_MAX_THREADS];
  struct {
    volatile uint32_t dev;
    volatile uint64_t handle; /* 0: empty */
    volatile uint64_t len;
  } handles[FZ_SHARED_HANDLES];
};

struct fz_op_record {
  uint64_t seq;
  const char *op;
  uint64_t a, b, c;
  long result;
};

struct fz_proc;

struct fz_thread {
  struct fz_proc *proc;
  unsigned int id;
  uint64_t rng;
  uint64_t seq;
  struct fz_op_record trace[FZ_TRACE];
  int raw;
  int scratch;
  uint64_t scratch_off;
  unsigned char *ram; /* FZ_IO_MAX bytes, page aligned */
  unsigned char *ram2;
  void *ring; /* struct io_uring *, NULL when io_uring is unavailable */
};

struct fz_proc {
  const struct fz_config *cfg;
  struct fz_shared *shared;
  unsigned int id;
  pthread_mutex_t lock;
  struct fz_file files[FZ_MAX_FILES];
  struct fz_slot slots[FZ_MAX_SLOTS];
  uint32_t next_gen;
  int devnull; /* replaces closed files' descriptors (see op_close) */
};

/* fuzz_trace.c */
uint64_t fz_rand(struct fz_thread *t);
uint64_t fz_below(struct fz_thread *t, uint64_t n);
uint64_t fz_mix(uint64_t x);
void fz_trace(struct fz_thread *t, const char *op, uint64_t a, uint64_t b, uint64_t c);
void fz_trace_result(struct fz_thread *t, long result);
/* Records a finding (seed, message, trace tail) in shared memory and exits the process with 1. */
void fz_fail(struct fz_thread *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
/* Checks errno-style result got (0 or errno) against want/alt (FZ_ANY, FZ_FAILS, errno). */
void fz_expect(struct fz_thread *t, int got, int want, int alt, const char *what);

/* Reads/writes *p guarded against SIGBUS/SIGSEGV; returns the signal or 0. */
int fz_guarded_cmp(const void *device, const void *ram, size_t len, size_t *diff_at);
int fz_guarded_fill(void *device, size_t len, uint64_t seed);
int fz_guarded_touch(volatile const unsigned char *p);
void fz_install_signal_guard(void);

/* fuzz_ops.c */
extern uint64_t fz_raw_size; /* bytes of the raw disk, set before the threads start */
void fz_step(struct fz_thread *t);
void fz_thread_cleanup(struct fz_thread *t, bool tidy);

#endif
