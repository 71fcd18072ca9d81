/* The OSU Micro-Benchmarks' idioms (their collective suite and its
 * osu_util_mpi helpers), written from their public shape, not copied: MPI_CHECK
 * around every call, MPI_Request and MPI_Status arrays for a window of
 * non-blocking messages completed with MPI_Waitall, MPI_Wait on one request,
 * MPI_Test polled from a "dummy compute" loop, timings reduced with
 * MPI_Reduce. Built against gridbcast's mpi.h (the compile test), and run:
 * it prints "osu_idioms: N ranks, ok". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW_SIZE 64
#define MAX_MSG 65536

#define MPI_CHECK(stmt)                                                           \
  do {                                                                            \
    int mpi_errno = (stmt);                                                       \
    if (MPI_SUCCESS != mpi_errno) {                                               \
      fprintf(stderr, "[%s:%d] MPI call failed with %d \n", __FILE__, __LINE__,   \
              mpi_errno);                                                         \
      exit(EXIT_FAILURE);                                                         \
    }                                                                             \
  } while (0)

static MPI_Request request[WINDOW_SIZE];
static MPI_Status reqstat[WINDOW_SIZE];

/* Polls a request the way the non-blocking benchmarks interleave compute. */
static double dummy_compute(double seconds, MPI_Request* req) {
  int flag = 0;
  MPI_Status status;
  double t0 = MPI_Wtime(), x = 0;
  while (MPI_Wtime() - t0 < seconds) {
    for (int i = 0; i < 1000; ++i) x += i * 0.5;
    MPI_CHECK(MPI_Test(req, &flag, &status));
    if (flag) break;
  }
  return x;
}

int main(int argc, char** argv) {
  int rank, numprocs, provided;
  MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &numprocs));
  char* s_buf = malloc(MAX_MSG);
  char* r_buf = malloc((size_t)MAX_MSG * WINDOW_SIZE);
  memset(s_buf, 'a', MAX_MSG);

  /* osu_bw's window between ranks 0 and 1 (others idle). */
  double t_start = 0.0, t_end = 0.0;
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  if (numprocs >= 2 && rank < 2) {
    for (int size = 1; size <= MAX_MSG; size *= 16) {
      t_start = MPI_Wtime();
      if (rank == 0) {
        for (int j = 0; j < WINDOW_SIZE; j++)
          MPI_CHECK(MPI_Isend(s_buf, size, MPI_CHAR, 1, 100, MPI_COMM_WORLD, request + j));
        MPI_CHECK(MPI_Waitall(WINDOW_SIZE, request, reqstat));
        MPI_CHECK(MPI_Recv(r_buf, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, &reqstat[0]));
      } else {
        for (int j = 0; j < WINDOW_SIZE; j++)
          MPI_CHECK(MPI_Irecv(r_buf + (size_t)j * size, size, MPI_CHAR, 0, 100, MPI_COMM_WORLD,
                              request + j));
        MPI_CHECK(MPI_Waitall(WINDOW_SIZE, request, reqstat));
        MPI_CHECK(MPI_Send(s_buf, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD));
      }
      t_end = MPI_Wtime();
    }
  }

  /* A non-blocking exchange overlapped with compute, then MPI_Wait. */
  MPI_Request req;
  MPI_Status status;
  const int right = (rank + 1) % numprocs, left = (rank + numprocs - 1) % numprocs;
  MPI_CHECK(MPI_Irecv(r_buf, MAX_MSG, MPI_CHAR, left, 200, MPI_COMM_WORLD, &req));
  MPI_CHECK(MPI_Send(s_buf, MAX_MSG, MPI_CHAR, right, 200, MPI_COMM_WORLD));
  dummy_compute(0.001, &req);
  MPI_CHECK(MPI_Wait(&req, &status));

  /* The collective suite's timing report. */
  double latency = (t_end - t_start) * 1e6, min_time = 0, max_time = 0, avg_time = 0;
  MPI_CHECK(MPI_Reduce(&latency, &min_time, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Reduce(&latency, &max_time, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Reduce(&latency, &avg_time, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
  if (rank == 0) printf("osu_idioms: %d ranks, ok\n", numprocs);
  free(s_buf);
  free(r_buf);
  MPI_CHECK(MPI_Finalize());
  return EXIT_SUCCESS;
}
