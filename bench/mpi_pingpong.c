/* Point-to-point latency and bandwidth between ranks 0 and 1, OSU style
 * (osu_latency, osu_bw), for any MPI: how the message protocol costs.
 *
 * Usage: mpi_pingpong [MAX_BYTES]   (default 64 MiB; sizes 1 B, then x4)
 *
 * latency: half the round trip of MPI_Send/MPI_Recv ping-pong, averaged over
 *          iterations (more for small sizes), after a warm-up;
 * bandwidth: a window of 16 MPI_Isend answered by 16 MPI_Irecv, MPI_Waitall,
 *            then a 4-byte acknowledgement, repeated; bytes / time.
 * Rank 0 prints one line per size: "SIZE latency_us MB_per_s". Other ranks
 * only take part in the barriers. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kWindow = 16 };

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long long max = argc > 1 ? atoll(argv[1]) : 64ll << 20;
  if (size < 2) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  /* A window of distinct buffers where it fits in 256 MiB, else one reused. */
  size_t room = (size_t)max * kWindow;
  if (room > ((size_t)256 << 20)) room = (size_t)256 << 20;
  if (room < (size_t)max) room = (size_t)max;
  char* buf = malloc(room);
  char* one = malloc((size_t)max);
  memset(one, 'a', (size_t)max);
  if (rank == 0) printf("# bytes latency_us MB_per_s\n");
  for (long long n = 1; n <= max; n *= 4) {
    const int iters = n <= 65536 ? 1000 : n <= (4 << 20) ? 50 : 10;
    const int warm = iters / 10 + 1;
    double lat = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank <= 1) {
      double start = 0;
      for (int i = 0; i < warm + iters; ++i) {
        if (i == warm) start = MPI_Wtime();
        if (rank == 0) {
          MPI_Send(one, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
          MPI_Recv(one, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(one, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(one, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
      }
      lat = (MPI_Wtime() - start) / iters / 2 * 1e6;
    }
    /* Bandwidth: windows of kWindow sends (the same buffer when it would not fit). */
    const int rounds = n <= 65536 ? 100 : n <= (4 << 20) ? 10 : 2;
    const int distinct = (size_t)n * kWindow <= room;
    double bw = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank <= 1) {
      MPI_Request reqs[kWindow];
      const double start = MPI_Wtime();
      for (int r = 0; r < rounds; ++r) {
        for (int w = 0; w < kWindow; ++w) {
          char* at = distinct ? buf + (size_t)n * w : buf;
          if (rank == 0)
            MPI_Isend(at, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &reqs[w]);
          else
            MPI_Irecv(at, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &reqs[w]);
        }
        MPI_Waitall(kWindow, reqs, MPI_STATUSES_IGNORE);
        int ack = 0;
        if (rank == 0)
          MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
          MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
      }
      bw = (double)n * kWindow * rounds / (MPI_Wtime() - start) / 1e6;
    }
    if (rank == 0) {
      printf("%lld %.2f %.1f\n", n, lat, bw);
      fflush(stdout);
    }
  }
  free(buf);
  free(one);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
