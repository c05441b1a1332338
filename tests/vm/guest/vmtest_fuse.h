/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vmtest_fuse.h - a minimal FUSE file system, served straight from
 * /dev/fuse by a child process, whose one file's reads the test holds:
 * an O_DIRECT read from it pins the reader's pages until the test lets the
 * daemon answer (issue 37: a holder class that user space controls).
 */
#ifndef VMTEST_FUSE_H
#define VMTEST_FUSE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fuse_holder {
  char dir[64];
  char path[80];
  pid_t daemon;
  /* Daemon -> test: a byte per READ it holds.  Test -> daemon: a byte per answer. */
  int held_fd, answer_fd;
};

/*
 * Mounts the file system on @dir (created) with one file, "data", of @size
 * bytes whose every byte is @fill, and starts its daemon.  Its reads are
 * answered only when fuse_holder_answer() says so; the file opens with
 * FOPEN_DIRECT_IO, so a read pins the caller's pages for its whole wait.
 * Returns 0; 1 when this kernel has no FUSE (detail says why); -1.
 */
int fuse_holder_start(struct fuse_holder *h, const char *dir, uint64_t size, unsigned char fill,
                      char *detail, size_t len);
/* Waits up to @ms for the daemon to hold a READ.  Returns 0 or -1 (timeout). */
int fuse_holder_wait_read(struct fuse_holder *h, int ms);
/* Lets the daemon answer the READ it holds. */
int fuse_holder_answer(struct fuse_holder *h);
/* Kills the daemon (a held READ fails with ENOTCONN), unmounts, waits. */
void fuse_holder_stop(struct fuse_holder *h);

#endif
