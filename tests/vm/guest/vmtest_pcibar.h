/* SPDX-License-Identifier: GPL-2.0 */
#ifndef VMTEST_PCIBAR_H
#define VMTEST_PCIBAR_H
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
#endif
