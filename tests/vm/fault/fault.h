/* SPDX-License-Identifier: GPL-2.0 */
/*
 * fault.h - phx-fault: the fault suite's module-level stress programs
 * (docs/hardening.md, "Fault injection"): the provider's free callback
 * under concurrent I/O, and registration under memory pressure.  Results
 * go to the rig in its protocol (vmtest_common.c).
 */
#ifndef PHX_FAULT_H
#define PHX_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmtest.h"

/* The first failure of a multi-threaded step; it also stops the step. */
struct fault_failure {
  atomic_int failed;
  atomic_int stop;
  char text[512];
};
void fault_fail(struct fault_failure *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Monotonic seconds. */
double fault_now(void);
/* Uniform in [0, n) from a splitmix64 state; n > 0. */
uint64_t fault_below(uint64_t *state, uint64_t n);

/* Thread-safe guarded accesses to memory that may be revoked under us:
 * return 0, or the signal (SIGBUS, SIGSEGV) the access raised. */
int fault_guarded_touch(volatile const unsigned char *p);
/* Compares device memory with ram; *diff_at = len when equal. */
int fault_guarded_cmp(const unsigned char *device, const unsigned char *ram, size_t len,
                      size_t *diff_at);
void fault_install_guard(void);

/* Waits up to 10 s for regs_live and pages_mapped to reach 0 (deferred
 * teardowns); 0 when they did, -1 otherwise (info holds the last values). */
int fault_wait_idle(int fd, struct phxfs_info *info);

int fault_free_callback(const char *mode, unsigned int device, double seconds, uint64_t seed);
int fault_memory_pressure(double seconds, uint64_t seed);
int fault_nvme_remove(const char *bdf);

#endif
