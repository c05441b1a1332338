// SPDX-License-Identifier: GPL-2.0
/*
 * phx-vmtest GROUP [MODE]: runs one group of the guest suite and reports in
 * the rig's protocol on $PHX_REPORT.  guest.sh loads the modules each group
 * needs.  Exit status: 0 when every test passed.
 */
#include <stdio.h>
#include <string.h>

#include "vmtest.h"
#include "vmtest_pcibar.h"

int main(int argc, char **argv) {
  vm_report_open();
  if (argc >= 2 && !strcmp(argv[1], "pcibar"))
    return vmtest_pcibar();
  if (argc >= 2 && !strcmp(argv[1], "many"))
    return vmtest_many();
  if (argc >= 2 && !strcmp(argv[1], "access"))
    return vmtest_access();
  if (argc >= 2 && !strcmp(argv[1], "p2p"))
    return vmtest_p2p();
  if (argc >= 3 && !strcmp(argv[1], "p2p-pool"))
    return vmtest_p2p_pool(argv[2]);
  if (argc >= 2 && !strcmp(argv[1], "limits"))
    return vmtest_limits();
  if (argc >= 2 && !strcmp(argv[1], "highbar-nvidia"))
    return vmtest_high_bar_nvidia();
  if (argc >= 2 && !strcmp(argv[1], "highbar"))
    return vmtest_high_bar();
  if (argc >= 3 && !strcmp(argv[1], "nvidia"))
    return vmtest_nvidia(argv[2]);
  fprintf(stderr,
          "usage: phx-vmtest pcibar | many | access | limits | p2p | p2p-pool owned|foreign | "
          "highbar | highbar-nvidia | "
          "nvidia persistent|legacy|missing|appeared\n");
  return 2;
}
