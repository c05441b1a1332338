// SPDX-License-Identifier: GPL-2.0
/*
 * phx-fault free-callback legacy|persistent|legacy-deregister-race|legacy-deregister-reuse DEVICE
 * SECONDS SEED phx-fault mem-pressure SECONDS SEED phx-fault nvme-remove BDF The fault suite's
 * module-level steps (fault.sh loads the modules each needs); results in the rig's protocol on
 * $PHX_REPORT.  Exit status 0 when every check passed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"

int main(int argc, char **argv) {
  vm_report_open();
  fault_install_guard();
  if (argc == 6 && !strcmp(argv[1], "free-callback"))
    return fault_free_callback(argv[2], (unsigned int)strtoul(argv[3], NULL, 0),
                               strtod(argv[4], NULL), strtoull(argv[5], NULL, 0));
  if (argc == 4 && !strcmp(argv[1], "mem-pressure"))
    return fault_memory_pressure(strtod(argv[2], NULL), strtoull(argv[3], NULL, 0));
  if (argc == 3 && !strcmp(argv[1], "nvme-remove"))
    return fault_nvme_remove(argv[2]);
  fprintf(stderr,
          "usage: phx-fault free-callback "
          "legacy|persistent|legacy-deregister-race|legacy-deregister-reuse DEVICE SECONDS "
          "SEED\n"
          "       phx-fault mem-pressure SECONDS SEED\n"
          "       phx-fault nvme-remove BDF\n");
  return 2;
}
