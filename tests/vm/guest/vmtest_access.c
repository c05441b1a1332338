// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_access.c - who can reach device memory through phxfs: the node's
 * permissions, a read-only open, CAP_SYS_RAWIO for PCI BAR ranges, forked
 * children (also after MADV_DOFORK, and through the inherited file), core
 * dumps, MADV_DODUMP, REGISTER's copy-out racing a DEREGISTER of the
 * predicted handle; and what /proc/PID/mem gives (a note, see
 * docs/security.md).  Uses device 1's BAR from 136 MiB (no other group's:
 * the pcibar group has [0, 128 MiB), the libphoenix tests [160, 256 MiB)).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmtest.h"
#include "vmtest_pcibar.h"

#define ACCESS_DEV 1
#define ACCESS_BAR_OFF (136 * MiB)
#define NOBODY 65534

static int open_map(uint64_t off, uint64_t len, struct phxfs_register *r, unsigned char **map) {
  int fd = phx_open_dev(ACCESS_DEV);

  if (fd < 0)
    return -1;
  if (phx_register(fd, ACCESS_BAR_OFF + off, len, r) || !(*map = phx_map(fd, r))) {
    close(fd);
    return -1;
  }
  return fd;
}

static int become_nobody(void) {
  return setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY) ? -1 : 0;
}

static int t_nobody_cannot_open(char *detail, size_t len) {
  struct stat st;
  int status;
  pid_t pid;

  EXPECT(!stat(PHXFS_DEVICE_PREFIX "1", &st), "stat: %s", strerror(errno));
  EXPECT((st.st_mode & 0007) == 0, "node is world-accessible: mode %o", st.st_mode & 0777);
  pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    int fd;

    if (become_nobody())
      _exit(10);
    fd = open(PHXFS_DEVICE_PREFIX "1", O_RDWR);
    _exit(fd < 0 && errno == EACCES ? 0 : fd < 0 ? 11 : 12);
  }
  EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "child status %#x", status);
  EXPECT(WEXITSTATUS(status) == 0, "as uid %d: %s", NOBODY,
         WEXITSTATUS(status) == 12   ? "open succeeded"
         : WEXITSTATUS(status) == 10 ? "could not drop privileges"
                                     : "open failed, but not with EACCES");
  snprintf(detail, len, "mode %o uid %u gid %u: uid %d gets EACCES", st.st_mode & 0777, st.st_uid,
           st.st_gid, NOBODY);
  return 0;
}

static int t_readonly_open_cannot_register(char *detail, size_t len) {
  static const struct {
    int flags;
    const char *name;
  } opens[] = {{O_RDONLY, "O_RDONLY"}, {O_WRONLY, "O_WRONLY"}};
  struct phxfs_info before, after;
  struct phxfs_register r;
  int info = open(PHXFS_DEVICE_PREFIX "1", O_RDONLY), fd, ret;
  size_t i;

  EXPECT(info >= 0, "open O_RDONLY: %s", strerror(errno));
  for (i = 0; i < sizeof(opens) / sizeof(opens[0]); i++) {
    EXPECT(!phx_get_info(info, &before), "GET_INFO on a read-only open");
    fd = open(PHXFS_DEVICE_PREFIX "1", opens[i].flags);
    EXPECT(fd >= 0, "open %s: %s", opens[i].name, strerror(errno));
    ret = phx_register(fd, ACCESS_BAR_OFF, 64 * KiB, &r);
    if (!ret)
      phx_deregister(fd, r.handle);
    close(fd);
    EXPECT(!phx_get_info(info, &after), "GET_INFO");
    /* A write-only open cannot map: a registration there only pins. */
    EXPECT(ret == -EBADF, "REGISTER on an %s open: %s, want EBADF (it would pin pages)",
           opens[i].name, ret ? strerror(-ret) : "succeeded");
    EXPECT(after.regs_total == before.regs_total, "%s: regs_total %llu -> %llu", opens[i].name,
           (unsigned long long)before.regs_total, (unsigned long long)after.regs_total);
  }
  close(info);
  snprintf(detail, len,
           "O_RDONLY: GET_INFO works; O_RDONLY and O_WRONLY: REGISTER is EBADF and pins nothing");
  return 0;
}

/* Drops CAP_SYS_RAWIO from the effective and permitted sets (still uid 0). */
static int drop_cap_sys_rawio(void) {
  struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct data[2];

  if (syscall(SYS_capget, &hdr, data))
    return -1;
  data[CAP_SYS_RAWIO / 32].effective &= ~(1U << (CAP_SYS_RAWIO % 32));
  data[CAP_SYS_RAWIO / 32].permitted &= ~(1U << (CAP_SYS_RAWIO % 32));
  data[CAP_SYS_RAWIO / 32].inheritable &= ~(1U << (CAP_SYS_RAWIO % 32));
  return syscall(SYS_capset, &hdr, data) ? -1 : 0;
}

/* A child without CAP_SYS_RAWIO registers a range: 0, or the errno. */
static int register_without_rawio(void) {
  int status;
  pid_t pid = fork();

  if (pid < 0)
    return -1;
  if (pid == 0) {
    struct phxfs_register r;
    int fd, ret;

    if (drop_cap_sys_rawio())
      _exit(200);
    fd = phx_open_dev(ACCESS_DEV);
    if (fd < 0)
      _exit(201);
    ret = phx_register(fd, ACCESS_BAR_OFF + 384 * KiB, 64 * KiB, &r);
    if (!ret && phx_deregister(fd, r.handle))
      _exit(202);
    _exit(-ret);
  }
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

static int set_pcibar_open(const char *value) {
  FILE *f = fopen("/sys/module/phxfs/parameters/pcibar_open", "w");

  if (!f)
    return -1;
  fputs(value, f);
  return fclose(f) ? -1 : 0;
}

static int t_pcibar_needs_rawio(char *detail, size_t len) {
  int without, granted;

  without = register_without_rawio();
  EXPECT(without == EPERM, "REGISTER of a pcibar range without CAP_SYS_RAWIO: %s, want EPERM",
         without == 0     ? "succeeded"
         : without >= 200 ? "child setup failed"
         : without > 0    ? strerror(without)
                          : "child failed");
  EXPECT(!set_pcibar_open("1"), "cannot write /sys/module/phxfs/parameters/pcibar_open");
  granted = register_without_rawio();
  set_pcibar_open("0");
  EXPECT(granted == 0, "with pcibar_open=1, REGISTER without CAP_SYS_RAWIO: %s",
         granted > 0 && granted < 200 ? strerror(granted) : "child failed");
  snprintf(detail, len,
           "without CAP_SYS_RAWIO REGISTER is EPERM; pcibar_open=1 grants it to every opener");
  return 0;
}

/*
 * A forked child shares the parent's file; once the parent has unmapped
 * its registration, the child must neither map it (reading device memory
 * and taking the parent's only mapping slot) nor deregister it.
 */
static int t_forked_child_cannot_map(char *detail, size_t len) {
  struct phxfs_register r;
  unsigned char *map;
  int fd = open_map(320 * KiB, 64 * KiB, &r, &map), status;
  pid_t pid;

  EXPECT(fd >= 0, "register and map: %s", strerror(errno));
  map[0] = 0x5a;
  EXPECT(!munmap(map, r.length), "munmap");
  pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    void *m = mmap(NULL, r.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)r.mmap_offset);

    if (m != MAP_FAILED)
      _exit(((volatile unsigned char *)m)[0] == 0x5a ? 1 : 2);
    if (errno != EACCES)
      _exit(3);
    _exit(phx_deregister(fd, r.handle) == -EACCES ? 0 : 4);
  }
  EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "child status %#x", status);
  switch (WEXITSTATUS(status)) {
    case 0:
      break;
    case 1:
      FAILF("a forked child mapped its parent's registration and read device memory");
    case 2:
      FAILF("a forked child mapped its parent's registration");
    case 3:
      FAILF("a forked child's mmap of its parent's registration failed, but not with EACCES");
    default:
      FAILF("a forked child's DEREGISTER of its parent's handle did not fail with EACCES");
  }
  map = phx_map(fd, &r);
  EXPECT(map, "the parent cannot map its registration again: %s", strerror(errno));
  EXPECT(map[0] == 0x5a, "device byte changed");
  EXPECT(!munmap(map, r.length) && !phx_deregister(fd, r.handle), "teardown");
  close(fd);
  snprintf(detail, len,
           "a forked child gets EACCES on mmap and DEREGISTER of its parent's registration; the "
           "parent maps it again");
  return 0;
}

struct parked_register {
  int fd;
  struct phxfs_register *arg;
  int err;
};

static void *parked_register(void *p) {
  struct parked_register *k = p;

  k->err = ioctl(k->fd, PHXFS_IOC_REGISTER, k->arg) ? errno : 0;
  return NULL;
}

/*
 * REGISTER's copy-out of the handle parked by a userfaultfd write-protect
 * fault, DEREGISTER of the predicted handle from another thread, then the
 * copy-out fails (the page turned read-only): the registration must not
 * have been reachable before its handle reached user space.  Before the
 * fix the DEREGISTER freed it and REGISTER's undo path used it after free
 * (a hung CPU under slub_debug).
 */
static int t_register_copyout_race(char *detail, size_t len) {
  const uint64_t off = ACCESS_BAR_OFF + 256 * KiB, size = 64 * KiB;
  struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_PAGEFAULT_FLAG_WP};
  struct parked_register k;
  struct uffdio_register ureg;
  struct uffdio_writeprotect wp;
  struct phxfs_register probe, *arg;
  struct phxfs_info before, after;
  struct pollfd pfd;
  struct uffd_msg msg;
  uint64_t predicted;
  pthread_t th;
  int fd = phx_open_dev(ACCESS_DEV), uffd, dereg, mapped, polled;
  void *page, *m;

  EXPECT(fd >= 0, "open: %s", strerror(errno));
  EXPECT(!phx_register(fd, off, size, &probe), "probe REGISTER: %s", strerror(errno));
  /* Handles are the first mmap page offset, plus one guard page. */
  predicted = probe.handle + size / 4096 + 1;
  EXPECT(!phx_deregister(fd, probe.handle), "probe DEREGISTER");
  EXPECT(!phx_get_info(fd, &before), "GET_INFO");
  page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT(page != MAP_FAILED, "mmap");
  arg = page;
  memset(arg, 0, sizeof(*arg));
  arg->abi_version = PHXFS_ABI_VERSION;
  arg->argsz = sizeof(*arg);
  arg->device_addr = off;
  arg->length = size;
  uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
  if (uffd < 0) {
    snprintf(detail, len, "userfaultfd: %s", strerror(errno));
    return 1;
  }
  ureg.range.start = (uintptr_t)page;
  ureg.range.len = 4096;
  ureg.mode = UFFDIO_REGISTER_MODE_WP;
  wp.range = ureg.range;
  wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
  if (ioctl(uffd, UFFDIO_API, &api) || ioctl(uffd, UFFDIO_REGISTER, &ureg) ||
      ioctl(uffd, UFFDIO_WRITEPROTECT, &wp)) {
    snprintf(detail, len, "userfaultfd write-protect: %s", strerror(errno));
    close(uffd);
    return 1;
  }
  k.fd = fd;
  k.arg = arg;
  k.err = -1;
  EXPECT(!pthread_create(&th, NULL, parked_register, &k), "pthread_create");
  /* The copy_from_user reads; the copy-out of the handle writes and parks. */
  pfd.fd = uffd;
  pfd.events = POLLIN;
  polled = poll(&pfd, 1, 10000);
  if (polled == 1 && read(uffd, &msg, sizeof(msg)) != sizeof(msg))
    polled = -1;
  dereg = phx_deregister(fd, predicted);
  m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(predicted * 4096));
  mapped = m != MAP_FAILED;
  if (mapped)
    munmap(m, size);
  /* Makes the retried copy-out fail; closing the uffd wakes it. */
  mprotect(page, 4096, PROT_READ);
  close(uffd);
  pthread_join(th, NULL);
  munmap(page, 4096);
  EXPECT(polled == 1, "REGISTER's copy-out did not park on the write-protected page");
  EXPECT(k.err == EFAULT, "REGISTER with a failing copy-out: %s, want EFAULT",
         k.err ? strerror(k.err) : "succeeded");
  EXPECT(dereg == -ENOENT,
         "DEREGISTER of the handle (%llu) while REGISTER's copy-out was parked: %s, want ENOENT",
         (unsigned long long)predicted, dereg ? strerror(-dereg) : "succeeded");
  EXPECT(!mapped, "mmap of the unpublished registration succeeded");
  EXPECT(!phx_get_info(fd, &after), "GET_INFO");
  EXPECT(after.regs_live == before.regs_live, "regs_live %llu -> %llu",
         (unsigned long long)before.regs_live, (unsigned long long)after.regs_live);
  EXPECT(!phx_register(fd, off, size, &probe) && !phx_deregister(fd, probe.handle),
         "the range cannot be registered again: %s", strerror(errno));
  close(fd);
  snprintf(detail, len,
           "while REGISTER's copy-out was parked, DEREGISTER of the predicted handle gave ENOENT "
           "and mmap failed; the failed copy-out undid the registration (EFAULT)");
  return 0;
}

/* The child reports what touching the parent's device mapping did. */
static int child_touch_status(unsigned char *map, uint64_t size) {
  int status;
  pid_t pid = fork();

  if (pid < 0)
    return -1;
  if (pid == 0) {
    int sig = touch_signal(map), sig_end = touch_signal(map + size - 1);

    _exit(sig && sig_end ? 0 : 1);
  }
  if (waitpid(pid, &status, 0) != pid)
    return -1;
  return status;
}

static int t_fork_after_dofork(char *detail, size_t len) {
  struct phxfs_register r;
  struct phxfs_info info;
  unsigned char *map;
  int fd = open_map(0, 64 * KiB, &r, &map), status, adv;

  EXPECT(fd >= 0, "register and map: %s", strerror(errno));
  map[0] = 0xa5;
  status = child_touch_status(map, r.length);
  EXPECT(status == 0, "child read the device mapping without MADV_DOFORK (status %#x)", status);
  adv = madvise(map, r.length, MADV_DOFORK) ? errno : 0;
  status = child_touch_status(map, r.length);
  EXPECT(status == 0, "after MADV_DOFORK (%s) a forked child read device memory (status %#x)",
         adv ? strerror(adv) : "accepted", status);
  EXPECT(map[0] == 0xa5, "parent's mapping changed");
  {
    /* The child's (empty) copy is no mapping: the parent can unmap and map again meanwhile. */
    pid_t holder = fork();
    unsigned char *again;

    EXPECT(holder >= 0, "fork");
    if (holder == 0) {
      pause();
      _exit(0);
    }
    EXPECT(!munmap(map, r.length), "munmap while a child holds the copy");
    again = phx_map(fd, &r);
    kill(holder, SIGKILL);
    waitpid(holder, &status, 0);
    EXPECT(again, "mmap again while a forked child holds its copy: %s", strerror(errno));
    map = again;
  }
  EXPECT(!munmap(map, r.length) && !phx_deregister(fd, r.handle), "teardown");
  EXPECT(!phx_get_info(fd, &info), "info");
  close(fd);
  snprintf(detail, len,
           "MADV_DOFORK %s; forked children fault on the range either way, and their copy does "
           "not keep the parent from mapping it again",
           adv ? "refused" : "accepted");
  return 0;
}

/* Returns the offset of needle in the file, -1 if absent, -2 on error. */
static long long file_find(const char *path, const unsigned char *needle, size_t n) {
  int fd = open(path, O_RDONLY);
  struct stat st;
  unsigned char *p;
  long long at = -1;
  size_t i;

  if (fd < 0 || fstat(fd, &st))
    return -2;
  p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return -2;
  for (i = 0; i + n <= (size_t)st.st_size; i++)
    if (p[i] == needle[0] && !memcmp(p + i, needle, n)) {
      at = (long long)i;
      break;
    }
  munmap(p, (size_t)st.st_size);
  return at;
}

static int t_core_dump(char *detail, size_t len) {
  const uint64_t dev_seed = 0xc0de0001, ram_seed = 0xc0de0002;
  unsigned char dev_marker[64], ram_marker[64];
  char old_pattern[256] = "", core[64];
  long long dev_at, ram_at;
  FILE *f;
  int status;
  pid_t pid;

  f = fopen("/proc/sys/kernel/core_pattern", "r");
  EXPECT(f && fgets(old_pattern, sizeof(old_pattern), f), "read core_pattern");
  fclose(f);
  f = fopen("/proc/sys/kernel/core_pattern", "w");
  EXPECT(f && fputs("/tmp/phx-core.%p", f) >= 0 && !fclose(f), "set core_pattern");
  pid = fork();
  EXPECT(pid >= 0, "fork");
  if (pid == 0) {
    struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
    struct phxfs_register r;
    unsigned char *map, *ram = malloc(64 * KiB);

    setrlimit(RLIMIT_CORE, &rl);
    prctl(PR_SET_DUMPABLE, 1);
    if (!ram || open_map(64 * KiB, 64 * KiB, &r, &map) < 0)
      _exit(3);
    /* Generated in place: the only copy of these bytes is in device memory. */
    pattern_fill(map, 64 * KiB, dev_seed);
    pattern_fill(ram, 64 * KiB, ram_seed);
    abort();
  }
  EXPECT(waitpid(pid, &status, 0) == pid, "waitpid");
  f = fopen("/proc/sys/kernel/core_pattern", "w");
  if (f) {
    fputs(old_pattern, f);
    fclose(f);
  }
  EXPECT(WIFSIGNALED(status) && WCOREDUMP(status), "child status %#x: no core dump", status);
  snprintf(core, sizeof(core), "/tmp/phx-core.%d", (int)pid);
  pattern_fill(dev_marker, sizeof(dev_marker), dev_seed);
  pattern_fill(ram_marker, sizeof(ram_marker), ram_seed);
  ram_at = file_find(core, ram_marker, sizeof(ram_marker));
  dev_at = file_find(core, dev_marker, sizeof(dev_marker));
  unlink(core);
  /* The RAM marker proves the search works on this core. */
  EXPECT(ram_at >= 0, "the core lacks the process's own heap bytes (%lld)", ram_at);
  EXPECT(dev_at == -1, "device memory bytes in the core at offset %lld", dev_at);
  snprintf(detail, len, "core dump has the heap (at %lld) but not the device mapping (VM_DONTDUMP)",
           ram_at);
  return 0;
}

static int t_dodump_refused(char *detail, size_t len) {
  struct phxfs_register r;
  unsigned char *map;
  int fd = open_map(128 * KiB, 64 * KiB, &r, &map), ret;

  EXPECT(fd >= 0, "register and map: %s", strerror(errno));
  ret = madvise(map, r.length, MADV_DODUMP) ? errno : 0;
  EXPECT(!munmap(map, r.length) && !phx_deregister(fd, r.handle), "teardown");
  close(fd);
  EXPECT(ret == EINVAL, "MADV_DODUMP: %s, want EINVAL", ret ? strerror(ret) : "accepted");
  snprintf(detail, len, "MADV_DODUMP refused (EINVAL): the range stays out of core dumps");
  return 0;
}

/* Information for docs/security.md, not a verdict: ptrace-level access. */
static void note_proc_mem(void) {
  struct phxfs_register r;
  unsigned char *map, buf[16];
  char note[256];
  ssize_t n;
  int fd = open_map(192 * KiB, 64 * KiB, &r, &map), mem;

  if (fd < 0)
    return;
  pattern_fill(map, 16, 0x5eed);
  pattern_fill(buf, 16, 0x5eed);
  mem = open("/proc/self/mem", O_RDONLY);
  memset(buf, 0, sizeof(buf));
  n = mem >= 0 ? pread(mem, buf, sizeof(buf), (off_t)(uintptr_t)map) : -1;
  {
    unsigned char want[16];

    pattern_fill(want, 16, 0x5eed);
    snprintf(note, sizeof(note), "PHX-NOTE access: /proc/self/mem read of a device mapping: %s\n",
             n < 0                        ? strerror(errno)
             : memcmp(buf, want, 16) == 0 ? "returns the device bytes (ptrace-level access)"
                                          : "returns other bytes");
  }
  {
    const char *path = getenv("PHX_REPORT");
    int rep = path ? open(path, O_WRONLY | O_APPEND) : -1;

    if (rep >= 0) {
      if (write(rep, note, strlen(note)) < 0)
        perror("note");
      close(rep);
    }
  }
  if (mem >= 0)
    close(mem);
  munmap(map, r.length);
  phx_deregister(fd, r.handle);
  close(fd);
}

int vmtest_access(void) {
  vm_run("access/nobody_cannot_open", t_nobody_cannot_open);
  vm_run("access/readonly_open_cannot_register", t_readonly_open_cannot_register);
  vm_run("access/pcibar_needs_cap_sys_rawio", t_pcibar_needs_rawio);
  vm_run("access/fork_after_madv_dofork", t_fork_after_dofork);
  vm_run("access/forked_child_cannot_map", t_forked_child_cannot_map);
  vm_run("access/core_dump_excludes_device_memory", t_core_dump);
  vm_run("access/madv_dodump_refused", t_dodump_refused);
  note_proc_mem();
  /* Last: before its fix it hangs the kernel. */
  vm_run("access/register_copyout_race", t_register_copyout_race);
  return vm_failures() ? 1 : 0;
}
