/* The test programs' data: a byte pattern that differs with the position and
 * the seed (so a misplaced or stale byte shows), a buffer filled with it, and
 * the check of one. */
#ifndef GRIDBCAST_TESTS_MPI_PATTERN_H
#define GRIDBCAST_TESTS_MPI_PATTERN_H

static inline unsigned char pattern(long long i, int seed) {
  return (unsigned char)((i * 131 + seed * 7 + (i >> 11)) & 0xff);
}

static inline void fill(unsigned char* b, long long n, int seed) {
  for (long long i = 0; i < n; ++i) b[i] = pattern(i, seed);
}

/* 1 if any byte of b differs from the pattern of `seed`. */
static inline int bad_bytes(const unsigned char* b, long long n, int seed) {
  for (long long i = 0; i < n; ++i)
    if (b[i] != pattern(i, seed)) return 1;
  return 0;
}

#endif
