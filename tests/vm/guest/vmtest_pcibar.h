/* SPDX-License-Identifier: GPL-2.0 */
#ifndef VMTEST_PCIBAR_H
#define VMTEST_PCIBAR_H
#include <stddef.h>

#include "nvemu_uapi.h"
#include "vmtest.h"
int vmtest_pcibar(void);
int vmtest_nvidia(const char *mode);
int vmtest_many(void);
int vmtest_access(void);
int vmtest_limits(void);
int vmtest_p2p(void);
int vmtest_p2p_pool(const char *mode);
int vmtest_high_bar(void);
/* vmtest_walks.c: the high BAR's claim walks yield (highbar.sh). */
int t_claim_walks_yield(char *detail, size_t len);
int t_walks_share_the_cpu(char *detail, size_t len);
/* The same, with nvemu on the high BAR: a free callback beside the walks. */
int vmtest_high_bar_nvidia(void);
/* vmtest_starved.c: tenants whose walks cannot get a CPU (issue 54, item 1). */
int t_starved_walkers_beside_register(char *detail, size_t len);
int t_starved_walkers_beside_callbacks(char *detail, size_t len);
int t_starved_register_beside_its_free(char *detail, size_t len);
/* vmtest_poller.c: the poller's walks and hand-overs (issue 54, item 4). */
int t_poller_walks_outside_its_lock(char *detail, size_t len);

/* Helpers of vmtest_walks.c shared with vmtest_starved.c. */
double vm_now_s(void);
int vm_pin_to_cpu(int cpu);
int vm_cmp_double(const void *a, const void *b);
/* The median of the @k longest of @n sorted latencies. */
double vm_median_of_longest(const double *sorted, int n, int k);
/* A 64 KiB emulated allocation (nvemu) and its legacy-pinned registration. */
struct small_reg {
  struct nvemu_alloc a;
  struct phxfs_register r;
};
int emu_small_register(int emu, int fd, struct small_reg *s);
/* cudaFree of @s; the seconds its free callback took, or -1 with errno. */
double emu_timed_free(int emu, const struct small_reg *s);
#endif
