/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vmtest_uffd.h - an O_DIRECT read stalled by userfaultfd: the read's
 * iovec is the registration's pages and then one anonymous page that
 * userfaultfd leaves missing.  The block layer pins the device pages,
 * then faults on the missing page and waits for user space to supply it:
 * a hold on device pages for as long as user space likes, which ends in
 * DMA into them (issue 37).
 */
#ifndef VMTEST_UFFD_H
#define VMTEST_UFFD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct uffd_holder {
  int uffd, file;
  unsigned char *page; /* the missing page, registered with userfaultfd */
  char path[128];
  uint64_t size;
  unsigned char *map;
  pthread_t reader;
  ssize_t result;
  int err;
  volatile int done;
};

/*
 * Makes a file on the rig's ext4 of @size + 4096 bytes of @landing and a
 * missing page.  Returns 0; 1 when this kernel has no userfaultfd (detail
 * says why); -1.
 */
int uffd_holder_start(struct uffd_holder *h, uint64_t size, unsigned char landing, char *detail,
                      size_t len);
/*
 * Starts the read into @map (its @size bytes, then the missing page) and
 * waits up to 5 s for its fault.  Returns 0 when the read waits on user
 * space (the device pages pinned), or -errno when it failed at once.
 */
int uffd_holder_hold(struct uffd_holder *h, unsigned char *map);
/* Supplies the page; the read goes on.  Returns 0 when it read everything. */
int uffd_holder_resolve(struct uffd_holder *h);
void uffd_holder_stop(struct uffd_holder *h);

#endif
