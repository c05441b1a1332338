/* SPDX-License-Identifier: MIT */
/*
 * What kvikio does: dlopen("libcufile.so.0") by its soname, found through
 * LD_LIBRARY_PATH, then dlsym the entry points it needs.  The library found
 * must be Phoenix's (phx_cufile_last_error is ours alone).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "cufile_shim/cufile_abi.h"

static const char *const kSymbols[] = {"cuFileDriverOpen",
                                       "cuFileDriverClose",
                                       "cuFileDriverClose_v2",
                                       "cuFileDriverGetProperties",
                                       "cuFileDriverSetPollMode",
                                       "cuFileDriverSetMaxDirectIOSize",
                                       "cuFileDriverSetMaxCacheSize",
                                       "cuFileDriverSetMaxPinnedMemSize",
                                       "cuFileGetVersion",
                                       "cuFileUseCount",
                                       "cuFileHandleRegister",
                                       "cuFileHandleDeregister",
                                       "cuFileBufRegister",
                                       "cuFileBufDeregister",
                                       "cuFileRead",
                                       "cuFileWrite",
                                       "cuFileReadAsync",
                                       "cuFileWriteAsync",
                                       "cuFileStreamRegister",
                                       "cuFileStreamDeregister",
                                       "cuFileBatchIOSetUp",
                                       "cuFileBatchIOSubmit",
                                       "cuFileBatchIOGetStatus",
                                       "cuFileBatchIOCancel",
                                       "cuFileBatchIODestroy",
                                       "phx_cufile_last_error"};

int main(void) {
  void *lib = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  int failures = 0;
  for (size_t i = 0; i < sizeof(kSymbols) / sizeof(kSymbols[0]); ++i) {
    if (dlsym(lib, kSymbols[i]) == NULL) {
      fprintf(stderr, "missing %s\n", kSymbols[i]);
      ++failures;
    }
  }
  /* libphoenix's internals stay hidden. */
  if (dlsym(lib, "phxfs_open") != NULL) {
    fprintf(stderr, "libphoenix's C API leaks out of libcufile.so.0\n");
    ++failures;
  }
  /* POSIX's way to take a function from dlsym in ISO C. */
  CUfileError_t (*get_version)(int *) = NULL;
  CUfileError_t (*open_driver)(void) = NULL;
  CUfileError_t (*close_driver)(void) = NULL;
  *(void **)&get_version = dlsym(lib, "cuFileGetVersion");
  *(void **)&open_driver = dlsym(lib, "cuFileDriverOpen");
  *(void **)&close_driver = dlsym(lib, "cuFileDriverClose");
  int version = 0;
  if (get_version == NULL || get_version(&version).err != CU_FILE_SUCCESS || version < 1070 ||
      open_driver == NULL || open_driver().err != CU_FILE_SUCCESS || close_driver == NULL ||
      close_driver().err != CU_FILE_SUCCESS) {
    fprintf(stderr, "driver open/close or version failed\n");
    ++failures;
  }
  struct link_map *map = NULL;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != NULL) {
    printf("libcufile.so.0 is %s, cuFile version %d\n", map->l_name, version);
  }
  dlclose(lib);
  return failures == 0 ? 0 : 1;
}
