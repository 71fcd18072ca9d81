/* The check macro of the MPI test programs: counts every check, prints the
 * ones that fail with the rank, the place and the condition. Each program
 * defines `rank`, `checks` and `failures`. */
#ifndef GRIDBCAST_TESTS_MPI_CHECK_H
#define GRIDBCAST_TESTS_MPI_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    ++checks;                                                                   \
    if (!(cond)) {                                                              \
      ++failures;                                                               \
      fprintf(stderr, "rank %d: %s:%d: %s: ", rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                             \
      fprintf(stderr, "\n");                                                    \
    }                                                                           \
  } while (0)

#endif
