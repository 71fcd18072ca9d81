/* MPI_Bcast timing for peer comparisons.
 *
 * Usage: mpi_bcast BYTES ITERATIONS [ROOT [WARMUP [SYNC]]]
 *
 * Every rank times its own MPI_Bcast call after an untimed synchronisation;
 * the times are collected outside the timed part. WARMUP (default 0) untimed
 * broadcasts run first. SYNC is how the ranks are lined up before each call:
 *   barrier  (default) MPI_Barrier before each broadcast, then the times are
 *            gathered with MPI_Gather
 *   root     exactly the sync of `gridbcast bench --method barrier`: after each
 *            broadcast (warm-up ones too) every other rank sends its time to
 *            the root, which receives them in rank order, then sends each rank
 *            in rank order a "go" (point-to-point messages); the next call
 *            starts when a rank has its go. Ranks far from the root start their
 *            clocks later, by up to one one-way latency, as in gridbcast bench.
 * Rank 0 (the root with SYNC root) prints one JSON line:
 *   min, median, max   over iterations of the slowest rank's time (as before:
 *                      the broadcast time of each iteration, after a barrier)
 *   rank_avg, rank_min, rank_max
 *                      over the non-root ranks of each rank's mean time over
 *                      the iterations: exactly what `gridbcast bench --method
 *                      barrier` reports as Avg/Min/Max (Max is its broadcast
 *                      time), so the two can sit in one table
 *   slowest_mean, slowest_rel_stdev
 *                      mean and relative standard deviation of the slowest
 *                      rank's time per iteration (gridbcast bench's Stdev)
 *   rank_mean          every rank's mean (the root's entry is 0)
 *   verified           every rank's copy matched the root's data
 * All times in seconds. The line is printed and flushed before a final
 * barrier; with MPI_BCAST_SKIP_FINALIZE set every rank then exits without
 * MPI_Finalize (MPICH over UCX's TCP transport can hang there, UCX 1.13). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Square root without libm, so the program links with a bare mpicc as before. */
static double root2(double v) {
  if (!(v > 0)) return 0;
  double x = v > 1 ? v : 1;
  for (int i = 0; i < 200; ++i) {
    double next = 0.5 * (x + v / x);
    if (next == x) break;
    x = next;
  }
  return x;
}

/* gridbcast bench's Sync: report to the root, then the root's go to each rank. */
static void root_sync(double mine, double* all, int rank, int size, int root) {
  int go = 1;
  if (rank != root) {
    MPI_Send(&mine, 1, MPI_DOUBLE, root, 1, MPI_COMM_WORLD);
    MPI_Recv(&go, 1, MPI_INT, root, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return;
  }
  all[root] = mine;
  for (int r = 0; r < size; ++r)
    if (r != root) MPI_Recv(&all[r], 1, MPI_DOUBLE, r, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  for (int r = 0; r < size; ++r)
    if (r != root) MPI_Send(&go, 1, MPI_INT, r, 2, MPI_COMM_WORLD);
}

static void bcast_all(char* buf, long long bytes, int root) {
  /* MPI_Bcast counts are int: split large messages. */
  for (long long off = 0; off < bytes; off += 1 << 30) {
    long long n = bytes - off < (1 << 30) ? bytes - off : (1 << 30);
    MPI_Bcast(buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 3) {
    if (rank == 0) fprintf(stderr, "usage: %s BYTES ITERATIONS [ROOT [WARMUP]]\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long long bytes = atoll(argv[1]);
  int iters = atoi(argv[2]);
  int root = argc > 3 ? atoi(argv[3]) : 0;
  int warmup = argc > 4 ? atoi(argv[4]) : 0;
  const char* sync = argc > 5 ? argv[5] : "barrier";
  int root_synced = strcmp(sync, "root") == 0;
  if (iters < 1 || root < 0 || root >= size || warmup < 0 || bytes < 0 ||
      (!root_synced && strcmp(sync, "barrier") != 0)) {
    if (rank == 0)
      fprintf(stderr, "%s: need ITERATIONS >= 1, 0 <= ROOT < %d, WARMUP >= 0, SYNC barrier or root\n",
              argv[0], size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  /* The rank that collects the times and prints: the root with the root sync
   * (it receives the reports), rank 0 otherwise. */
  int reporter = root_synced ? root : 0;
  char* buf = malloc(bytes > 0 ? (size_t)bytes : 1);
  double* times = malloc(sizeof(double) * (size_t)iters);   /* slowest rank per iteration */
  double* all = malloc(sizeof(double) * (size_t)size);      /* one iteration, every rank */
  double* sums = calloc((size_t)size, sizeof(double));      /* per rank, over iterations */
  for (long long i = 0; i < bytes; ++i) buf[i] = rank == root ? (char)(i * 31) : 0;
  for (int w = 0; w < warmup; ++w) {
    if (!root_synced) MPI_Barrier(MPI_COMM_WORLD);
    bcast_all(buf, bytes, root);
    if (root_synced) root_sync(0, all, rank, size, root);
  }
  for (int it = 0; it < iters; ++it) {
    if (!root_synced) MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    bcast_all(buf, bytes, root);
    double dt = MPI_Wtime() - t0;
    if (root_synced)
      root_sync(dt, all, rank, size, root);
    else
      MPI_Gather(&dt, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, reporter, MPI_COMM_WORLD);
    if (rank == reporter) {
      double worst = 0;
      for (int r = 0; r < size; ++r) {
        if (r == root && size > 1) continue;
        sums[r] += all[r];
        if (all[r] > worst) worst = all[r];
      }
      times[it] = worst;
    }
  }
  int bad = 0;
  for (long long i = 0; i < bytes; ++i) bad |= buf[i] != (char)(i * 31);
  int any_bad = 0;
  MPI_Reduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, reporter, MPI_COMM_WORLD);
  if (rank == reporter) {
    double ravg = 0, rmin = 1e300, rmax = 0, smean = 0, svar = 0;
    int counted = 0;
    for (int r = 0; r < size; ++r) {
      if (r == root && size > 1) continue;
      double m = sums[r] / iters;
      ravg += m;
      rmin = m < rmin ? m : rmin;
      rmax = m > rmax ? m : rmax;
      ++counted;
    }
    ravg /= counted;
    for (int it = 0; it < iters; ++it) smean += times[it] / iters;
    for (int it = 0; it < iters; ++it) svar += (times[it] - smean) * (times[it] - smean);
    double srel = iters > 1 && smean > 0 ? root2(svar / (iters - 1)) / smean : 0;
    qsort(times, (size_t)iters, sizeof(double), cmp);
    printf("{\"ranks\": %d, \"bytes\": %lld, \"iterations\": %d, \"warmup\": %d, \"root\": %d, \"sync\": \"%s\", "
           "\"min\": %.6f, \"median\": %.6f, \"max\": %.6f, \"rank_avg\": %.6f, \"rank_min\": %.6f, "
           "\"rank_max\": %.6f, \"slowest_mean\": %.6f, \"slowest_rel_stdev\": %.4f, \"rank_mean\": [",
           size, bytes, iters, warmup, root, sync, times[0], times[iters / 2], times[iters - 1], ravg, rmin,
           rmax, smean, srel);
    for (int r = 0; r < size; ++r)
      printf("%s%.6f", r ? ", " : "", r == root && size > 1 ? 0.0 : sums[r] / iters);
    printf("], \"verified\": %s}\n", any_bad ? "false" : "true");
    fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(buf);
  free(times);
  free(all);
  free(sums);
  if (getenv("MPI_BCAST_SKIP_FINALIZE")) _Exit(0);
  MPI_Finalize();
  return 0;
}
