// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_uffd.c - an O_DIRECT read that userfaultfd stalls after the block
 * layer has pinned the device pages it reads into (see vmtest_uffd.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "vmtest.h"
#include "vmtest_uffd.h"

#define PAGE 4096

int uffd_holder_start(struct uffd_holder *h, uint64_t size, unsigned char landing, char *detail,
                      size_t len) {
  struct uffdio_api api = {.api = UFFD_API};
  struct uffdio_register reg;
  const char *dir = getenv("PHX_EXT4_DIR");
  unsigned char *bytes;
  int fd;

  memset(h, 0, sizeof(*h));
  h->uffd = h->file = -1;
  h->size = size;
  h->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  if (h->uffd < 0) {
    snprintf(detail, len, "no userfaultfd on this kernel: %s", strerror(errno));
    return 1;
  }
  h->page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  reg = (struct uffdio_register){.range = {.start = (uintptr_t)h->page, .len = PAGE},
                                 .mode = UFFDIO_REGISTER_MODE_MISSING};
  if (ioctl(h->uffd, UFFDIO_API, &api) || h->page == MAP_FAILED ||
      ioctl(h->uffd, UFFDIO_REGISTER, &reg)) {
    snprintf(detail, len, "userfaultfd setup: %s", strerror(errno));
    if (h->page == MAP_FAILED)
      h->page = NULL;
    uffd_holder_stop(h);
    return -1;
  }
  static int made;

  /* The pid too: a forked child's counter starts where its parent's was. */
  snprintf(h->path, sizeof(h->path), "%s/phx-uffd-holder-%d-%d", dir ? dir : "/mnt/ext4",
           (int)getpid(), made++);
  bytes = malloc(size + PAGE);
  fd = open(h->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (bytes)
    memset(bytes, landing, size + PAGE);
  if (!bytes || fd < 0 || write_exact(fd, bytes, size + PAGE, 0) || fsync(fd)) {
    snprintf(detail, len, "%s: %s", h->path, strerror(errno));
    free(bytes);
    if (fd >= 0)
      close(fd);
    uffd_holder_stop(h);
    return -1;
  }
  free(bytes);
  close(fd);
  h->file = open(h->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (h->file < 0) {
    snprintf(detail, len, "%s with O_DIRECT: %s", h->path, strerror(errno));
    uffd_holder_stop(h);
    return -1;
  }
  return 0;
}

static void *stalled_read(void *arg) {
  struct uffd_holder *h = arg;
  struct iovec iov[2] = {{h->map, h->size}, {h->page, PAGE}};

  h->result = preadv(h->file, iov, 2, 0);
  h->err = errno;
  h->done = 1;
  return NULL;
}

int uffd_holder_hold(struct uffd_holder *h, unsigned char *map) {
  struct pollfd p = {.fd = h->uffd, .events = POLLIN};
  struct uffd_msg msg;

  h->map = map;
  if (pthread_create(&h->reader, NULL, stalled_read, h))
    return -EAGAIN;
  for (int i = 0; i < 100 && !h->done; i++)
    if (poll(&p, 1, 50) == 1 && read(h->uffd, &msg, sizeof(msg)) == (ssize_t)sizeof(msg) &&
        msg.event == UFFD_EVENT_PAGEFAULT)
      return 0;
  /* No fault: the read ended (refused, or it never pinned), or it hangs. */
  if (!h->done)
    return -ETIMEDOUT;
  pthread_join(h->reader, NULL);
  h->reader = 0;
  return -(h->err ? h->err : EIO);
}

int uffd_holder_resolve(struct uffd_holder *h) {
  static unsigned char zero[PAGE];
  struct uffdio_copy copy = {
      .dst = (uintptr_t)h->page, .src = (uintptr_t)zero, .len = PAGE, .mode = 0};

  if (ioctl(h->uffd, UFFDIO_COPY, &copy) && errno != EEXIST)
    return -1;
  pthread_join(h->reader, NULL);
  h->reader = 0;
  return h->result == (ssize_t)(h->size + PAGE) ? 0 : -1;
}

void uffd_holder_stop(struct uffd_holder *h) {
  /* A read still waiting gets its page and ends, so its thread can be joined. */
  if (h->reader)
    uffd_holder_resolve(h);
  if (h->file >= 0)
    close(h->file);
  if (h->uffd >= 0)
    close(h->uffd);
  if (h->page)
    munmap(h->page, PAGE);
  if (h->path[0])
    unlink(h->path);
  h->file = h->uffd = -1;
  h->page = NULL;
  h->path[0] = 0;
}
