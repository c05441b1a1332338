// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_fuse.c - a minimal FUSE daemon on /dev/fuse (the kernel's
 * protocol, no libfuse) for the holder tests: a root directory with one
 * read-only file whose READs it answers only when the test says so.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmtest.h"
#include "vmtest_fuse.h"

#define ROOT_ID FUSE_ROOT_ID
#define FILE_ID 2
#define FILE_NAME "data"
/* Larger than any request: the kernel's 32-page READs and their header. */
#define REQ_BUF (256 * 1024)

struct daemon_state {
  int dev;
  uint64_t size;
  unsigned char fill;
  int held_fd, answer_fd;
};

static void reply(const struct daemon_state *d, uint64_t unique, int error, const void *body,
                  size_t len) {
  struct fuse_out_header out = {
      .len = (uint32_t)(sizeof(out) + len), .error = error, .unique = unique};
  struct iovec iov[2] = {{&out, sizeof(out)}, {(void *)body, len}};

  /* ENOENT: the request was interrupted meanwhile; nothing to do. */
  (void)!writev(d->dev, iov, len ? 2 : 1);
}

static void fill_attr(const struct daemon_state *d, uint64_t node, struct fuse_attr *a) {
  memset(a, 0, sizeof(*a));
  a->ino = node;
  a->blksize = 4096;
  if (node == ROOT_ID) {
    a->mode = S_IFDIR | 0755;
    a->nlink = 2;
  } else {
    a->mode = S_IFREG | 0444;
    a->nlink = 1;
    a->size = d->size;
    a->blocks = (d->size + 511) / 512;
  }
}

/* Answers a READ with the file's bytes: @fill up to its end. */
static void answer_read(const struct daemon_state *d, uint64_t unique,
                        const struct fuse_read_in *in, unsigned char *buf) {
  uint64_t n = in->offset >= d->size ? 0 : d->size - in->offset;

  if (n > in->size)
    n = in->size;
  memset(buf, d->fill, (size_t)n);
  reply(d, unique, 0, buf, (size_t)n);
}

static void serve(const struct daemon_state *d) {
  unsigned char *req = malloc(REQ_BUF), *data = malloc(REQ_BUF);

  if (!req || !data)
    _exit(1);
  for (;;) {
    ssize_t n = read(d->dev, req, REQ_BUF);
    const struct fuse_in_header *in = (const void *)req;
    const void *arg = req + sizeof(*in);

    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == ENOENT))
      continue;
    if (n < (ssize_t)sizeof(*in))
      _exit(0); /* ENODEV: unmounted */
    switch (in->opcode) {
      case FUSE_INIT: {
        const struct fuse_init_in *i = arg;
        struct fuse_init_out o = {
            .major = FUSE_KERNEL_VERSION,
            .minor = i->minor < FUSE_KERNEL_MINOR_VERSION ? i->minor : FUSE_KERNEL_MINOR_VERSION,
            .max_write = 4096};

        reply(d, in->unique, 0, &o, sizeof(o));
        break;
      }
      case FUSE_LOOKUP: {
        struct fuse_entry_out o = {
            .nodeid = FILE_ID, .generation = 1, .entry_valid = 3600, .attr_valid = 3600};

        if (in->nodeid != ROOT_ID || strcmp(arg, FILE_NAME)) {
          reply(d, in->unique, -ENOENT, NULL, 0);
          break;
        }
        fill_attr(d, FILE_ID, &o.attr);
        reply(d, in->unique, 0, &o, sizeof(o));
        break;
      }
      case FUSE_GETATTR: {
        struct fuse_attr_out o = {.attr_valid = 3600};

        fill_attr(d, in->nodeid, &o.attr);
        reply(d, in->unique, 0, &o, sizeof(o));
        break;
      }
      case FUSE_OPEN:
      case FUSE_OPENDIR: {
        /* Direct I/O: reads skip the page cache and pin the caller's pages. */
        struct fuse_open_out o = {.fh = 1,
                                  .open_flags = in->opcode == FUSE_OPEN ? FOPEN_DIRECT_IO : 0};

        reply(d, in->unique, 0, &o, sizeof(o));
        break;
      }
      case FUSE_READ: {
        struct fuse_read_in r;
        char go;

        memcpy(&r, arg, sizeof(r));
        /* Hold it: the reader's pages stay pinned until the test answers. */
        if (write(d->held_fd, "R", 1) != 1 || read(d->answer_fd, &go, 1) != 1)
          _exit(1);
        answer_read(d, in->unique, &r, data);
        break;
      }
      case FUSE_READDIR:
      case FUSE_FLUSH:
      case FUSE_RELEASE:
      case FUSE_RELEASEDIR:
        reply(d, in->unique, 0, NULL, 0);
        break;
      case FUSE_FORGET:
      case FUSE_BATCH_FORGET:
      case FUSE_INTERRUPT:
        break; /* no answer expected */
      case FUSE_DESTROY:
        reply(d, in->unique, 0, NULL, 0);
        _exit(0);
      default:
        reply(d, in->unique, -ENOSYS, NULL, 0);
        break;
    }
  }
}

int fuse_holder_start(struct fuse_holder *h, const char *dir, uint64_t size, unsigned char fill,
                      char *detail, size_t len) {
  struct daemon_state d = {.size = size, .fill = fill};
  int held[2], answer[2];
  char opts[128];

  memset(h, 0, sizeof(*h));
  h->daemon = -1;
  h->held_fd = h->answer_fd = -1;
  snprintf(h->dir, sizeof(h->dir), "%s", dir);
  snprintf(h->path, sizeof(h->path), "%s/" FILE_NAME, dir);
  /* Busybox modprobe; /dev/fuse appears once the module is in. */
  if (system("modprobe fuse >/dev/null 2>&1"),
      (d.dev = open("/dev/fuse", O_RDWR | O_CLOEXEC)) < 0) {
    snprintf(detail, len, "no FUSE on this kernel: /dev/fuse: %s", strerror(errno));
    return 1;
  }
  mkdir(dir, 0755);
  snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", d.dev);
  if (mount("phxfuse", dir, "fuse", MS_NOSUID | MS_NODEV, opts)) {
    snprintf(detail, len, "mount fuse on %s: %s", dir, strerror(errno));
    close(d.dev);
    return -1;
  }
  if (pipe2(held, O_CLOEXEC) || pipe2(answer, O_CLOEXEC)) {
    snprintf(detail, len, "pipe: %s", strerror(errno));
    umount2(dir, MNT_DETACH);
    close(d.dev);
    return -1;
  }
  h->daemon = fork();
  if (!h->daemon) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /*
     * Nothing of the test's: a device file it closes must see its last
     * close then, and a daemon kept alive by our pipe's ends would never
     * see it end.
     */
    for (int fd = 3; fd < 1024; fd++)
      if (fd != d.dev && fd != held[1] && fd != answer[0])
        close(fd);
    d.held_fd = held[1];
    d.answer_fd = answer[0];
    serve(&d);
  }
  close(d.dev);
  close(held[1]);
  close(answer[0]);
  h->held_fd = held[0];
  h->answer_fd = answer[1];
  if (h->daemon < 0) {
    snprintf(detail, len, "fork: %s", strerror(errno));
    fuse_holder_stop(h);
    return -1;
  }
  return 0;
}

int fuse_holder_wait_read(struct fuse_holder *h, int ms) {
  struct pollfd p = {.fd = h->held_fd, .events = POLLIN};
  char r;

  return poll(&p, 1, ms) == 1 && read(h->held_fd, &r, 1) == 1 ? 0 : -1;
}

int fuse_holder_answer(struct fuse_holder *h) {
  return write(h->answer_fd, "G", 1) == 1 ? 0 : -1;
}

void fuse_holder_stop(struct fuse_holder *h) {
  if (h->daemon > 0) {
    kill(h->daemon, SIGKILL);
    waitpid(h->daemon, NULL, 0);
  }
  h->daemon = -1;
  umount2(h->dir, MNT_DETACH);
  if (h->held_fd >= 0)
    close(h->held_fd);
  if (h->answer_fd >= 0)
    close(h->answer_fd);
  h->held_fd = h->answer_fd = -1;
}
