/* SPDX-License-Identifier: MIT */
/*
 * The uapi header as a strict C11 program sees it: it must compile with
 * -pedantic and give the same layout as in C++ (checked at compile time here
 * and reported to the C++ test at run time).
 */
#include <stddef.h>

#include "phxfs_ioctl.h"

_Static_assert(sizeof(struct phxfs_info) == 112, "phxfs_info size");
_Static_assert(sizeof(struct phxfs_register) == 64, "phxfs_register size");
_Static_assert(sizeof(struct phxfs_deregister) == 32, "phxfs_deregister size");
_Static_assert(offsetof(struct phxfs_register, device_addr) == 16, "device_addr offset");

size_t phx_c_sizeof_info(void);
size_t phx_c_sizeof_register(void);
size_t phx_c_sizeof_deregister(void);
unsigned long phx_c_ioc_register(void);

size_t phx_c_sizeof_info(void) {
  return sizeof(struct phxfs_info);
}
size_t phx_c_sizeof_register(void) {
  return sizeof(struct phxfs_register);
}
size_t phx_c_sizeof_deregister(void) {
  return sizeof(struct phxfs_deregister);
}
unsigned long phx_c_ioc_register(void) {
  return PHXFS_IOC_REGISTER;
}
