/* SPDX-License-Identifier: MIT */
/* include/phoenix/phxfile.h as a C program sees it: strict C11, -pedantic
 * (built, never run: compiling is the test). */
#include "phoenix/phxfile.h"

int phxfile_header_c(void);

int phxfile_header_c(void) {
  return (int)sizeof(int64_t) + (int)sizeof(size_t);
}
