/* MPI_Bcast timing for peer comparisons: the same measurement as
 * `gridbcast launch` (time from the root's start to the last rank's finish,
 * after a barrier), median over iterations.
 * Usage: mpi_bcast BYTES ITERATIONS [ROOT] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 3) {
    if (rank == 0) fprintf(stderr, "usage: %s BYTES ITERATIONS [ROOT]\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long long bytes = atoll(argv[1]);
  int iters = atoi(argv[2]);
  int root = argc > 3 ? atoi(argv[3]) : 0;
  char* buf = malloc(bytes > 0 ? (size_t)bytes : 1);
  double* times = malloc(sizeof(double) * (size_t)iters);
  for (long long i = 0; i < bytes; ++i) buf[i] = rank == root ? (char)(i * 31) : 0;
  for (int it = 0; it < iters; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    /* MPI_Bcast counts are int: split large messages. */
    for (long long off = 0; off < bytes; off += 1 << 30) {
      long long n = bytes - off < (1 << 30) ? bytes - off : (1 << 30);
      MPI_Bcast(buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
    }
    double dt = MPI_Wtime() - t0, worst;
    MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    times[it] = worst;
  }
  int bad = 0;
  for (long long i = 0; i < bytes; ++i) bad |= buf[i] != (char)(i * 31);
  int any_bad = 0;
  MPI_Reduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    qsort(times, (size_t)iters, sizeof(double), cmp);
    printf("{\"ranks\": %d, \"bytes\": %lld, \"iterations\": %d, \"min\": %.6f, \"median\": %.6f, "
           "\"max\": %.6f, \"verified\": %s}\n",
           size, bytes, iters, times[0], times[iters / 2], times[iters - 1],
           any_bad ? "false" : "true");
    fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(buf);
  free(times);
  /* MPICH over UCX's TCP transport can hang in MPI_Finalize with 4+ ranks
   * (UCX 1.13); everything is reported, so skip it when asked. */
  if (getenv("MPI_BCAST_SKIP_FINALIZE")) _Exit(0);
  MPI_Finalize();
  return 0;
}
