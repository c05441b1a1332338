// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_limits.c - what a user may keep and what the administrator sees
 * (issue 37, finding 3): caps on registrations and bytes per user over
 * every device (EDQUOT past them), still counting pages a holder keeps
 * after their owner exits, and /proc/driver/phxfs listing every
 * registration with its owner, size, state and pin.  Run with pcibar
 * loaded on two devices.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vmtest.h"
#include "vmtest_pcibar.h"
#include "vmtest_uffd.h"

/*
 * Where the tests that write into dev0 do: a range that no earlier group
 * reads evidence from (the host compares those ranges with the disk after
 * the run).
 */
#define HELD_AREA (100 * MiB)

static int t_listing(char *detail, size_t len) {
  const uint64_t off = 3 * MiB;
  struct phxfs_register r;
  struct phx_listed l;
  struct stat st;
  int fd = phx_open_dev(0), found, status;
  pid_t child;

  EXPECT(!stat(PHX_LISTING, &st), "stat %s: %s", PHX_LISTING, strerror(errno));
  EXPECT((st.st_mode & 0777) == 0400 && st.st_uid == 0, "%s: mode %o uid %u", PHX_LISTING,
         st.st_mode & 0777, st.st_uid);
  EXPECT(fd >= 0 && !phx_register(fd, off, 64 * KiB, &r), "register: %s", strerror(errno));
  found = phx_find_listed(0, r.handle, &l);
  EXPECT(found == 1, "handle %llu not in %s (%d)", (unsigned long long)r.handle, PHX_LISTING,
         found);
  EXPECT(l.pid == getpid() && l.uid == 0 && l.addr == off && l.bytes == 64 * KiB &&
             !strcmp(l.state, "live") && !strcmp(l.pin, "bar"),
         "listed as pid %d uid %u addr %#llx bytes %llu state %s pin %s", l.pid, l.uid, l.addr,
         l.bytes, l.state, l.pin);
  child = fork();
  EXPECT(child >= 0, "fork");
  if (!child) {
    int opened;

    if (setgid(65534) || setuid(65534))
      _exit(2);
    opened = open(PHX_LISTING, O_RDONLY);
    _exit(opened < 0 && errno == EACCES ? 0 : 1);
  }
  EXPECT(waitpid(child, &status, 0) == child && WIFEXITED(status) && !WEXITSTATUS(status),
         "uid 65534 could read %s (status %#x)", PHX_LISTING, status);
  EXPECT(!phx_deregister(fd, r.handle), "deregister");
  found = phx_find_listed(0, r.handle, &l);
  EXPECT(found == 0, "handle %llu still listed after DEREGISTER (%d)", (unsigned long long)r.handle,
         found);
  close(fd);
  snprintf(detail, len,
           "%s (0400, root): dev, handle, pid, uid, address, bytes, state live, pin bar; gone "
           "after DEREGISTER; uid 65534 gets EACCES",
           PHX_LISTING);
  return 0;
}

static double mono_s(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_seconds(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

/* The median of @n seconds from @from (sorts them in place). */
static double median_s(double *from, int n) {
  qsort(from, (size_t)n, sizeof(double), cmp_seconds);
  return from[n / 2];
}

/*
 * Issue 54, item 7: a reader of PHX_LISTING gets it a page at a time, the
 * lock every REGISTER and free takes held for each.  Each page must cost
 * the same wherever it lies in the listing: a reader that found its place
 * by walking from the first registration again for every page did O(n)
 * under the lock per page, O(n^2) for the listing.  With LISTED_MANY
 * registrations, the median read() of the listing's last quarter is
 * compared with that of its first quarter.
 */
#define LISTED_MANY 32768
#define LISTED_AREA (128 * MiB)
#define LISTING_READS 4096

static int t_listing_scales(char *detail, size_t len) {
  static struct phxfs_register r[LISTED_MANY];
  static double took[LISTING_READS];
  int fd = phx_open_dev(0), listing = -1, n = 0, reads = 0, lines = 0, err = 0, quarter;
  double first, last, start, all = 0;
  char buf[4096];
  ssize_t got = 0;

  EXPECT(fd >= 0, "open: %s", strerror(errno));
  for (; n < LISTED_MANY; n++) {
    if (phx_register(fd, LISTED_AREA + (uint64_t)n * 4 * KiB, 4 * KiB, &r[n])) {
      err = errno;
      break;
    }
  }
  if (n == LISTED_MANY)
    listing = open(PHX_LISTING, O_RDONLY);
  while (listing >= 0 && reads < LISTING_READS) {
    start = mono_s();
    got = read(listing, buf, sizeof(buf));
    if (got <= 0)
      break;
    took[reads] = mono_s() - start;
    all += took[reads++];
    for (ssize_t i = 0; i < got; i++)
      lines += buf[i] == '\n';
  }
  if (got < 0)
    err = errno;
  if (listing >= 0)
    close(listing);
  /* Tears every one down. */
  close(fd);
  EXPECT(n == LISTED_MANY, "4 KiB registration %d of %d: %s", n, LISTED_MANY, strerror(err));
  EXPECT(listing >= 0 && got == 0, "reading %s: %s", PHX_LISTING, strerror(err));
  EXPECT(lines > LISTED_MANY, "%d lines listed with %d registrations", lines, LISTED_MANY);
  quarter = reads / 4;
  EXPECT(quarter >= 8, "the listing took only %d reads", reads);
  first = median_s(took, quarter);
  last = median_s(took + reads - quarter, quarter);
  snprintf(detail, len,
           "%d registrations, %d lines in %d reads, %.1f ms in all; median read %.3f ms in the "
           "first quarter, %.3f ms in the last",
           LISTED_MANY, lines, reads, all * 1e3, first * 1e3, last * 1e3);
  EXPECT(last < 2.5 * first,
         "a read of the listing's last quarter took %.3f ms (median), its first quarter's %.3f: "
         "each read walks the listing from its start (%d registrations, %d reads)",
         last * 1e3, first * 1e3, LISTED_MANY, reads);
  return 0;
}

static int t_caps(char *detail, size_t len) {
  struct phxfs_register a, b, c;
  int fd0 = phx_open_dev(0), fd1 = phx_open_dev(1), tuned, third, third_errno, fourth;

  EXPECT(fd0 >= 0 && fd1 >= 0, "open");
  tuned = phx_set_param("max_regs_per_user", 2);
  EXPECT(!tuned, "max_regs_per_user: %s", strerror(-tuned));
  /* Counted over every device. */
  EXPECT(!phx_register(fd0, 0, 64 * KiB, &a) && !phx_register(fd1, 0, 64 * KiB, &b),
         "two registrations: %s", strerror(errno));
  third = phx_register(fd0, 1 * MiB, 64 * KiB, &c);
  third_errno = errno;
  EXPECT(!phx_deregister(fd1, b.handle), "deregister");
  fourth = phx_register(fd0, 1 * MiB, 64 * KiB, &c);
  phx_set_param("max_regs_per_user", 65536);
  EXPECT(third && third_errno == EDQUOT, "a third registration: %s, want EDQUOT",
         third ? strerror(third_errno) : "succeeded");
  EXPECT(!fourth, "after a DEREGISTER: %s", strerror(errno));
  EXPECT(!phx_deregister(fd0, a.handle) && !phx_deregister(fd0, c.handle), "deregister");

  tuned = phx_set_param("max_pinned_mib_per_user", 1);
  EXPECT(!tuned, "max_pinned_mib_per_user: %s", strerror(-tuned));
  EXPECT(!phx_register(fd1, 0, 1 * MiB, &a), "1 MiB: %s", strerror(errno));
  third = phx_register(fd0, 0, 64 * KiB, &b);
  third_errno = errno;
  EXPECT(!phx_deregister(fd1, a.handle), "deregister");
  fourth = phx_register(fd0, 0, 64 * KiB, &b);
  phx_set_param("max_pinned_mib_per_user", 0);
  EXPECT(third && third_errno == EDQUOT, "64 KiB past 1 MiB: %s, want EDQUOT",
         third ? strerror(third_errno) : "succeeded");
  EXPECT(!fourth && !phx_deregister(fd0, b.handle), "after a DEREGISTER: %s", strerror(errno));
  close(fd0);
  close(fd1);
  snprintf(detail, len,
           "max_regs_per_user 2 over two devices and max_pinned_mib_per_user 1: the next "
           "REGISTER gets EDQUOT, and succeeds once one is deregistered");
  return 0;
}

/* Writes @text to @path; 0 or -errno. */
static int write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY), ret = 0;
  ssize_t n;

  if (fd < 0)
    return -errno;
  n = write(fd, text, strlen(text));
  if (n != (ssize_t)strlen(text))
    ret = n < 0 ? -errno : -EIO;
  close(fd);
  return ret;
}

/* What the child of t_caps_userns() exits with. */
enum userns_outcome {
  USERNS_CAPPED,       /* the second REGISTER got EDQUOT */
  USERNS_SECOND_HELD,  /* the second REGISTER succeeded */
  USERNS_SETUP_FAILED, /* setuid, unshare or the handshake */
  USERNS_FIRST_FAILED, /* the first REGISTER failed */
  USERNS_OTHER_ERROR,  /* the second failed, but not with EDQUOT */
};

/*
 * Issue 54, item 2: uid 1000 makes a user namespace whose map gives it two
 * uids (as newuidmap does with subordinate uids: 0 -> 1000, 1 -> 100000)
 * and registers as each.  Both count against uid 1000, so with
 * max_regs_per_user 1 the second REGISTER gets EDQUOT.
 */
static void userns_child(int ready, int go) {
  struct phxfs_register a, b;
  int fd = phx_open_dev(0), second;
  char c;

  if (fd < 0 || setresgid(1000, 1000, 1000) || setresuid(1000, 1000, 1000) ||
      unshare(CLONE_NEWUSER) || write(ready, "u", 1) != 1 || read(go, &c, 1) != 1 ||
      setresuid(0, 0, 0))
    _exit(USERNS_SETUP_FAILED);
  if (phx_register(fd, 4 * MiB, 64 * KiB, &a))
    _exit(USERNS_FIRST_FAILED);
  if (setresuid(1, 1, 1))
    _exit(USERNS_SETUP_FAILED);
  second = phx_register(fd, 5 * MiB, 64 * KiB, &b);
  if (second && errno != EDQUOT)
    _exit(USERNS_OTHER_ERROR);
  _exit(second ? USERNS_CAPPED : USERNS_SECOND_HELD);
}

static int t_caps_userns(char *detail, size_t len) {
  static const char *const why[] = {
      [USERNS_CAPPED] = "capped",
      [USERNS_SECOND_HELD] =
          "uid 1000 held two registrations with max_regs_per_user 1, one "
          "as each uid its namespace maps",
      [USERNS_SETUP_FAILED] = "setuid, unshare(CLONE_NEWUSER) or the handshake failed",
      [USERNS_FIRST_FAILED] = "the first REGISTER inside the namespace failed",
      [USERNS_OTHER_ERROR] = "the second REGISTER failed, but not with EDQUOT",
  };
  int ready[2], go[2], status = -1, tuned, mapped = 0, code;
  char path[64], c = 0;
  pid_t child;

  /* Debian's switch for namespaces made without privilege, where it exists. */
  (void)write_text("/proc/sys/kernel/unprivileged_userns_clone", "1\n");
  EXPECT(!pipe(ready) && !pipe(go), "pipe");
  tuned = phx_set_param("max_regs_per_user", 1);
  EXPECT(!tuned, "max_regs_per_user: %s", strerror(-tuned));
  /* The namespace's uids have no CAP_SYS_RAWIO (pcibar's own check). */
  tuned = phx_set_param("pcibar_open", 1);
  EXPECT(!tuned, "pcibar_open: %s", strerror(-tuned));
  child = fork();
  EXPECT(child >= 0, "fork: %s", strerror(errno));
  if (!child)
    userns_child(ready[1], go[0]);
  close(ready[1]);
  close(go[0]);
  if (read(ready[0], &c, 1) == 1) {
    /* What newuidmap does for a user with subordinate uids. */
    snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)child);
    mapped = write_text(path, "0 1000 1\n1 100000 1\n");
    if (!mapped) {
      snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)child);
      mapped = write_text(path, "0 1000 1\n");
    }
    if (!mapped && write(go[1], "g", 1) != 1)
      mapped = -EPIPE;
  }
  close(go[1]);
  close(ready[0]);
  waitpid(child, &status, 0);
  phx_set_param("max_regs_per_user", 65536);
  phx_set_param("pcibar_open", 0);
  EXPECT(!mapped, "writing the namespace's uid/gid map: %s", strerror(-mapped));
  EXPECT(WIFEXITED(status), "the namespace's child: status %#x", status);
  code = WEXITSTATUS(status);
  EXPECT(code == USERNS_CAPPED, "%s (exit %d)",
         code < (int)(sizeof(why) / sizeof(why[0])) ? why[code] : "unknown", code);
  snprintf(detail, len,
           "max_regs_per_user 1: uid 1000 registers as uid 0 of its user namespace (1000), then "
           "as uid 1 (100000): EDQUOT, both charged to uid 1000");
  return 0;
}

/*
 * Issue 54, item 2: by default one user may hold 90% of a device's BAR
 * (max_bar_percent_per_user), so that no user pins a whole one; users
 * with CAP_IPC_LOCK (root here) are exempt, as from mlock limits.  uid
 * 1000 registers 7/8 of dev0, then the last 1/8: EDQUOT.
 */
static int t_bar_share(char *detail, size_t len) {
  struct phxfs_info info;
  struct phxfs_register whole;
  int fd = phx_open_dev(0), status = -1, tuned, root_whole;
  bool read_ok;
  char value[16] = "";
  FILE *f;
  pid_t child;

  EXPECT(fd >= 0 && !phx_get_info(fd, &info), "dev0: %s", strerror(errno));
  f = fopen(PHX_PARAMS "max_bar_percent_per_user", "r");
  read_ok = f && fgets(value, sizeof(value), f);
  if (f)
    fclose(f);
  EXPECT(read_ok, "read max_bar_percent_per_user: %s", strerror(errno));
  EXPECT(atoi(value) == 90, "max_bar_percent_per_user is %s by default, want 90", value);
  tuned = phx_set_param("pcibar_open", 1);
  EXPECT(!tuned, "pcibar_open: %s", strerror(-tuned));
  child = fork();
  EXPECT(child >= 0, "fork: %s", strerror(errno));
  if (!child) {
    struct phxfs_register most, rest;
    uint64_t eighth = info.bar_size / 8;
    /* Its own file: its registrations end with it. */
    int own = phx_open_dev(0);

    if (own < 0 || setresgid(1000, 1000, 1000) || setresuid(1000, 1000, 1000))
      _exit(2);
    if (phx_register(own, 0, 7 * eighth, &most))
      _exit(3);
    if (!phx_register(own, 7 * eighth, eighth, &rest))
      _exit(4);
    _exit(errno == EDQUOT ? 0 : 5);
  }
  waitpid(child, &status, 0);
  phx_set_param("pcibar_open", 0);
  root_whole = phx_register(fd, 0, info.bar_size, &whole);
  if (!root_whole)
    phx_deregister(fd, whole.handle);
  close(fd);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) != 2 && WEXITSTATUS(status) != 3,
         "uid 1000's first 7/8 of the BAR: status %#x", status);
  EXPECT(WEXITSTATUS(status) != 4, "uid 1000 registered the whole BAR, in two pieces");
  EXPECT(!WEXITSTATUS(status), "uid 1000's last 1/8: not EDQUOT (status %#x)", status);
  EXPECT(!root_whole, "root (CAP_IPC_LOCK), the whole BAR: %s", strerror(errno));
  snprintf(detail, len,
           "max_bar_percent_per_user 90 by default: uid 1000 holds 7/8 of a %llu MiB BAR, the "
           "last 1/8 is EDQUOT; root (CAP_IPC_LOCK) registers all of it",
           (unsigned long long)(info.bar_size / MiB));
  return 0;
}

/*
 * A kernel with CONFIG_PCI_P2PDMA refused the pipe's hold on the pages
 * (EREMOTEIO): closes the pipe, says so in @detail, returns 1 (skip).
 */
static int hold_refused(int fds[2], const char *what, char *detail, size_t len) {
  close(fds[0]);
  close(fds[1]);
  snprintf(detail, len, "vmsplice cannot hold P2PDMA pages on this kernel (EREMOTEIO): %s", what);
  return 1;
}

/*
 * In a child: registers [@off, +@size) of dev0, fills its mapping with
 * @fill, vmsplices it into @pipe_w and writes the handle to @report_w.
 * Returns 0, else the child's exit status: 2 setup, 3 this kernel refuses
 * the pipe's hold (EREMOTEIO), 4.  The file and the mapping go to *@fd_out
 * and *@map_out (if given) once made.
 */
static int register_spliced(uint64_t off, uint64_t size, unsigned char fill, int pipe_w,
                            int report_w, struct phxfs_register *r, int *fd_out,
                            unsigned char **map_out) {
  int fd = phx_open_dev(0);
  unsigned char *map;
  struct iovec iov;
  ssize_t spliced;

  if (fd < 0 || phx_register(fd, off, size, r) || !(map = phx_map(fd, r)))
    return 2;
  if (fd_out)
    *fd_out = fd;
  if (map_out)
    *map_out = map;
  memset(map, fill, size);
  iov = (struct iovec){map, size};
  spliced = vmsplice(pipe_w, &iov, 1, 0);
  if (spliced < 0 && errno == EREMOTEIO)
    return 3;
  if (spliced != (ssize_t)size ||
      write(report_w, &r->handle, sizeof(r->handle)) != (ssize_t)sizeof(r->handle))
    return 4;
  return 0;
}

/*
 * A child registers, lets a pipe it shares with us hold the pages, and
 * exits.  The registration outlives it (its teardown waits for the pipe):
 * listed as held, with the child's pid, and still counted against the
 * user, until the pipe closes.
 */
static int t_held_after_exit(char *detail, size_t len) {
  const uint64_t off = HELD_AREA, size = 64 * KiB;
  struct phxfs_register r, mine;
  struct phx_listed l;
  int fds[2], report[2], status, found = -1, blocked, blocked_errno, fd, i;
  unsigned long long handle = 0;
  pid_t child;

  EXPECT(!pipe(fds) && !pipe(report), "pipe");
  child = fork();
  EXPECT(child >= 0, "fork");
  if (!child)
    _exit(register_spliced(off, size, 0x2d, fds[1], report[1], &r, NULL, NULL));
  close(report[1]);
  if (read(report[0], &handle, sizeof(handle)) != (ssize_t)sizeof(handle))
    handle = 0;
  close(report[0]);
  EXPECT(waitpid(child, &status, 0) == child && WIFEXITED(status), "child: %#x", status);
  if (WEXITSTATUS(status) == 3)
    return hold_refused(fds, "no registration outlives its owner here", detail, len);
  EXPECT(!WEXITSTATUS(status) && handle, "child: status %d", WEXITSTATUS(status));
  /* Its last close waited 250 ms and left the teardown to a work item. */
  found = phx_find_listed(0, handle, &l);
  phx_set_param("max_regs_per_user", 1);
  fd = phx_open_dev(0);
  blocked = phx_register(fd, 0, 64 * KiB, &mine);
  blocked_errno = errno;
  if (!blocked)
    phx_deregister(fd, mine.handle);
  close(fd);
  phx_set_param("max_regs_per_user", 65536);
  close(fds[0]);
  close(fds[1]);
  EXPECT(found == 1, "handle %llu of exited pid %d not listed (%d)", handle, (int)child, found);
  EXPECT(l.pid == child && !strcmp(l.state, "held") && l.bytes == size,
         "listed as pid %d state %s bytes %llu, want pid %d held %llu", l.pid, l.state, l.bytes,
         (int)child, (unsigned long long)size);
  EXPECT(blocked && blocked_errno == EDQUOT,
         "with max_regs_per_user 1 and the held one, REGISTER: %s, want EDQUOT",
         blocked ? strerror(blocked_errno) : "succeeded");
  for (i = 0; i < 100 && (found = phx_find_listed(0, handle, &l)) == 1; i++)
    usleep(100000);
  EXPECT(found == 0, "still listed 10 s after the pipe closed (%d, state %s)", found, l.state);
  snprintf(detail, len,
           "a registration whose owner exited while a pipe held it: listed held with its pid, "
           "counted against the user (EDQUOT at max_regs_per_user 1), gone once the pipe "
           "closed");
  return 0;
}

#define TRACING "/sys/kernel/debug/tracing/"

static int trace_write(const char *file, const char *text) {
  char path[128];
  int fd, ok;

  snprintf(path, sizeof(path), TRACING "%s", file);
  fd = open(path, O_WRONLY | O_TRUNC);
  if (fd < 0)
    return -1;
  ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  close(fd);
  return ok ? 0 : -1;
}

/*
 * Counts the work items of phxfs that ran in @seconds, by the workqueue
 * tracepoint (its lines name the function).  -1 when tracing is missing.
 */
static int count_phxfs_work(unsigned int seconds) {
  char line[512];
  FILE *f;
  int n = 0;

  if (trace_write("trace", "") ||
      trace_write("events/workqueue/workqueue_execute_start/enable", "1"))
    return -1;
  sleep(seconds);
  trace_write("events/workqueue/workqueue_execute_start/enable", "0");
  f = fopen(TRACING "trace", "r");
  if (!f)
    return -1;
  while (fgets(line, sizeof(line), f))
    if (line[0] != '#' && strstr(line, "phxfs"))
      n++;
  fclose(f);
  return n;
}

/* In the process that shares the registration's mm: the read that stalls. */
static int read_into_held(void *arg) {
  struct uffd_holder *h = arg;
  struct iovec iov[2] = {{h->map, h->size}, {h->page, 4096}};

  return preadv(h->file, iov, 2, 0) < 0;
}

/*
 * Where no pipe can hold P2PDMA pages: an O_DIRECT read into the @size
 * bytes at @map, stalled by userfaultfd on the page after them, from a
 * process that shares this one's mm (spawn_same_mm), so that the hold
 * outlives this process when it is killed.  The holder's file is unlinked
 * at once.  Writes @handle to @report_w and returns 0 with the reader's
 * pid in *@reader, else an exit status (3: no such hold here either).
 */
static int hold_by_stalled_read(unsigned char *map, uint64_t size, unsigned long long handle,
                                int report_w, pid_t *reader) {
  static struct uffd_holder h;
  struct pollfd p;
  struct uffd_msg msg;
  char why[160];

  if (uffd_holder_start(&h, size, 0x6b, why, sizeof(why)))
    return 3;
  unlink(h.path);
  h.path[0] = 0;
  h.map = map;
  *reader = spawn_same_mm(read_into_held, &h);
  if (*reader < 0)
    return 2;
  p = (struct pollfd){.fd = h.uffd, .events = POLLIN};
  if (poll(&p, 1, 5000) != 1 || read(h.uffd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg) ||
      msg.event != UFFD_EVENT_PAGEFAULT) {
    kill(*reader, SIGKILL);
    return 3;
  }
  return write(report_w, &handle, sizeof(handle)) == (ssize_t)sizeof(handle) ? 0 : 4;
}

/*
 * Issue 54, item 6: a DEREGISTER that waits for a page a pipe holds, and
 * is killed meanwhile, leaves the registration to the poller as a wait
 * that timed out does: listed as held (not releasing), so that a free
 * callback does not wait for it in full again.
 */
static int t_deregister_killed(char *detail, size_t len) {
  const uint64_t off = HELD_AREA + 1 * MiB, size = 64 * KiB;
  int fds[2], report[2], status = 0, found = -1, i;
  pid_t reader = 0;
  unsigned long long handle = 0;
  struct phx_listed l = {0};
  char waiting[sizeof(l.state)] = "";
  pid_t child;

  EXPECT(!pipe(fds) && !pipe(report), "pipe");
  child = fork();
  EXPECT(child >= 0, "fork");
  if (!child) {
    struct phxfs_register r;
    unsigned char *map = NULL;
    pid_t reader = 0;
    int fd = -1, code = register_spliced(off, size, 0x6b, fds[1], report[1], &r, &fd, &map);

    if (code == 3)
      code = hold_by_stalled_read(map, size, r.handle, report[1], &reader);
    if (code || write(report[1], &reader, sizeof(reader)) != (ssize_t)sizeof(reader))
      _exit(code ? code : 4);
    /* Waits for the pipe or the read until killed. */
    phx_deregister(fd, r.handle);
    _exit(5);
  }
  close(report[1]);
  if (read(report[0], &handle, sizeof(handle)) != (ssize_t)sizeof(handle) ||
      read(report[0], &reader, sizeof(reader)) != (ssize_t)sizeof(reader))
    handle = 0;
  close(report[0]);
  if (!handle) {
    EXPECT(waitpid(child, &status, 0) == child && WIFEXITED(status), "child: %#x", status);
    if (WEXITSTATUS(status) == 3)
      return hold_refused(fds, "no DEREGISTER waits for a holder here", detail, len);
    close(fds[0]);
    close(fds[1]);
    FAILF("child: status %d", WEXITSTATUS(status));
  }
  /* The DEREGISTER has begun once the registration is no longer live. */
  for (i = 0; i < 250; i++) {
    found = phx_find_listed(0, handle, &l);
    if (found != 1 || strcmp(l.state, "live"))
      break;
    usleep(20000);
  }
  snprintf(waiting, sizeof(waiting), "%s", found == 1 ? l.state : "unlisted");
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  found = phx_find_listed(0, handle, &l);
  close(fds[0]);
  close(fds[1]);
  /* The stalled read's process (P2PDMA kernels): its read ends with it. */
  if (reader > 0)
    kill(reader, SIGKILL);
  EXPECT(!strcmp(waiting, "releasing"), "while DEREGISTER waited for the pipe: %s, want releasing",
         waiting);
  EXPECT(WIFSIGNALED(status), "the DEREGISTER returned with the pipe open (status %#x)", status);
  EXPECT(found == 1 && !strcmp(l.state, "held"),
         "after the DEREGISTER waiting for a held page was killed: %s, want held",
         found == 1 ? l.state : "not listed");
  for (i = 0; i < 100 && (found = phx_find_listed(0, handle, &l)) == 1; i++)
    usleep(100000);
  EXPECT(found == 0, "still listed 10 s after the pipe closed (%d, state %s)", found, l.state);
  snprintf(
      detail, len,
      "a DEREGISTER waiting for %s (listed releasing) and killed: listed held, gone once "
      "that ended",
      reader > 0 ? "a stalled O_DIRECT read (P2PDMA: no pipe holds these pages)" : "a pipe's hold");
  return 0;
}

/*
 * Finding 4: every registration a holder kept past its teardown used to
 * poll its pages with its own work item, ten times a second each.  Now one
 * poller per device looks at all of them: 32 held registrations cost about
 * 10 work items a second, not 320, and all go within a poll of their
 * holder letting go.  The holders are O_DIRECT reads that userfaultfd
 * stalls (vmtest_uffd.h), which hold device pages on every kernel.
 */
#define POLLED 32

static int t_one_poller(char *detail, size_t len) {
  static struct uffd_holder h[POLLED];
  const uint64_t size = 64 * KiB;
  struct phxfs_register r[POLLED];
  struct phx_listed l;
  int fd = phx_open_dev(0), i, works, listed = 0, waited, held = 0, resolved = 0, got;

  EXPECT(fd >= 0, "open");
  for (i = 0; i < POLLED; i++) {
    unsigned char *map;

    got = uffd_holder_start(&h[i], 4 * KiB, 0x5a, detail, len);
    if (got) {
      while (i--)
        uffd_holder_stop(&h[i]);
      close(fd);
      return got;
    }
    EXPECT(!phx_register(fd, HELD_AREA + (uint64_t)i * size, size, &r[i]) &&
               (map = phx_map(fd, &r[i])),
           "registration %d: %s", i, strerror(errno));
    held += !uffd_holder_hold(&h[i], map);
    EXPECT(!munmap(map, size), "munmap");
  }
  /* The last close waits 250 ms for them all, then hands them over. */
  close(fd);
  for (i = 0; i < POLLED; i++)
    listed += phx_find_listed(0, r[i].handle, &l) == 1 && !strcmp(l.state, "held");
  works = count_phxfs_work(1);
  for (i = 0; i < POLLED; i++) {
    resolved += h[i].reader && !uffd_holder_resolve(&h[i]);
    uffd_holder_stop(&h[i]);
  }
  for (waited = 0; waited < 50; waited++) {
    int left = 0;

    for (i = 0; i < POLLED; i++)
      left += phx_find_listed(0, r[i].handle, &l) == 1;
    if (!left)
      break;
    usleep(20000);
  }
  EXPECT(held == POLLED && resolved == POLLED, "%d of %d reads stalled, %d finished", held, POLLED,
         resolved);
  EXPECT(listed == POLLED, "%d of %d registrations listed held after their file closed", listed,
         POLLED);
  EXPECT(works >= 0, "no workqueue tracepoint under %s", TRACING);
  EXPECT(works >= 5 && works <= 20,
         "%d work items of phxfs ran in 1 s with %d held registrations on one device, want "
         "one poller's 10",
         works, POLLED);
  EXPECT(waited < 50, "held registrations still listed 1 s after their reads went on");
  snprintf(detail, len,
           "%d registrations held by stalled reads: %d phxfs work items in 1 s (one poller per "
           "device), all gone %d ms after the reads went on",
           POLLED, works, waited * 20);
  return 0;
}

int vmtest_limits(void) {
  vm_run("limits/listing", t_listing);
  vm_run("limits/listing_scales", t_listing_scales);
  vm_run("limits/caps_per_user", t_caps);
  vm_run("limits/caps_across_user_namespaces", t_caps_userns);
  vm_run("limits/bar_share_per_user", t_bar_share);
  vm_run("limits/held_after_exit", t_held_after_exit);
  vm_run("limits/deregister_killed_is_held", t_deregister_killed);
  vm_run("limits/one_poller_per_device", t_one_poller);
  return vm_failures() ? 1 : 0;
}
