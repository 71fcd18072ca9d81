/* Non-blocking collectives (issue 26): MPI_Ibcast and MPI_Ibarrier,
 * progressed inside MPI calls like MPI_Isend.
 *   1. An Ibcast from every root, of several sizes, with a ring of
 *      Isend/Irecv between start and Waitall; every copy verified.
 *   2. Two Ibcasts (different roots) and an Ibarrier in flight, then a
 *      blocking Bcast before any of them is waited for.
 *   3. Progress: rank 0 starts an Ibcast and then sends BIG bytes to rank 1
 *      (a rendezvous), which receives them before it starts its Ibcast.
 *   4. An Ibcast on a split communicator, which is freed before the wait.
 *   5. Ibarrier is a barrier: rank 0 tests its Ibarrier before rank 1 can
 *      have entered (rank 1 first receives a message rank 0 sends after the
 *      test): not complete; complete after the wait.
 * BIG is argv[1] in MiB (default 16). Rank 0 prints
 * "ibcast: N ranks, C checks, F failed"; exit status 0 when all held.
 *
 * `ibcast overlap MIB`: the overlap figure of docs/MPI.md. Times a blocking
 * Bcast of MIB MiB from rank 0 (T_b), then an Ibcast of the same followed by
 * T_b of computation (slices of 1 ms, an MPI_Test between slices, as codes
 * that overlap do), then the Wait (T_o); rank 0 prints the three times and
 * T_o / (T_b + T_b). The computation sleeps: on a shared host, busy ranks
 * would measure the CPU, not the overlap. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pattern.h"

static int rank, size, checks, failures;

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* 1 */
static void every_root(void) {
  const long long sizes[] = {1, 1000, 300 * 1000, 3 * 1000 * 1000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
    const long long n = sizes[k];
    unsigned char* buf = malloc(n);
    for (int root = 0; root < size; ++root) {
      const int seed = root * 10 + (int)k;
      if (rank == root)
        fill(buf, n, seed);
      else
        memset(buf, 0, n);
      MPI_Request req[3];
      CHECK(MPI_Ibcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD, &req[0]) == MPI_SUCCESS,
            "Ibcast");
      int out = rank, in = -1;
      MPI_Isend(&out, 1, MPI_INT, (rank + 1) % size, 5, MPI_COMM_WORLD, &req[1]);
      MPI_Irecv(&in, 1, MPI_INT, (rank + size - 1) % size, 5, MPI_COMM_WORLD, &req[2]);
      MPI_Status st[3];
      CHECK(MPI_Waitall(3, req, st) == MPI_SUCCESS, "Waitall");
      CHECK(req[0] == MPI_REQUEST_NULL, "request released");
      CHECK(in == (rank + size - 1) % size, "ring %d", in);
      CHECK(!bad_bytes(buf, n, seed), "%lld bytes from root %d", n, root);
    }
    free(buf);
  }
}

/* 2 */
static void several_in_flight(void) {
  const long long n = 2 * 1000 * 1000;
  unsigned char* a = malloc(n);
  unsigned char* b = malloc(n);
  unsigned char* c = malloc(n);
  const int ra = 0, rb = size - 1, rc = size / 2;
  if (rank == ra)
    fill(a, n, 101);
  else
    memset(a, 0, n);
  if (rank == rb)
    fill(b, n, 102);
  else
    memset(b, 0, n);
  if (rank == rc)
    fill(c, n, 103);
  else
    memset(c, 0, n);
  MPI_Request req[3];
  MPI_Ibcast(a, (int)n, MPI_BYTE, ra, MPI_COMM_WORLD, &req[0]);
  MPI_Ibarrier(MPI_COMM_WORLD, &req[1]);
  MPI_Ibcast(b, (int)n, MPI_BYTE, rb, MPI_COMM_WORLD, &req[2]);
  CHECK(MPI_Bcast(c, (int)n, MPI_BYTE, rc, MPI_COMM_WORLD) == MPI_SUCCESS, "Bcast");
  CHECK(!bad_bytes(c, n, 103), "blocking Bcast behind two Ibcasts");
  MPI_Barrier(MPI_COMM_WORLD);
  /* Waited for out of order: the second first. */
  CHECK(MPI_Wait(&req[2], MPI_STATUS_IGNORE) == MPI_SUCCESS, "Wait b");
  MPI_Status st[2];
  CHECK(MPI_Waitall(2, req, st) == MPI_SUCCESS, "Waitall");
  CHECK(!bad_bytes(a, n, 101), "first Ibcast");
  CHECK(!bad_bytes(b, n, 102), "second Ibcast");
  free(a);
  free(b);
  free(c);
}

/* 3 */
static void send_while_broadcasting(long long big) {
  const long long n = 4 * 1000 * 1000;
  unsigned char* buf = malloc(n);
  unsigned char* msg = malloc(big);
  if (rank == 0)
    fill(buf, n, 7);
  else
    memset(buf, 0, n);
  MPI_Request req = MPI_REQUEST_NULL;
  if (rank == 0) {
    MPI_Ibcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    fill(msg, big, 8);
    CHECK(MPI_Send(msg, (int)big, MPI_BYTE, 1, 9, MPI_COMM_WORLD) == MPI_SUCCESS, "Send");
  } else if (rank == 1) {
    memset(msg, 0, big);
    CHECK(MPI_Recv(msg, (int)big, MPI_BYTE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS,
          "Recv");
    CHECK(!bad_bytes(msg, big, 8), "message");
    MPI_Ibcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
  } else {
    MPI_Ibcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
  }
  CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Wait");
  CHECK(!bad_bytes(buf, n, 7), "Ibcast beside a rendezvous");
  free(buf);
  free(msg);
}

/* 4 */
static void on_a_subcommunicator(void) {
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  int hsize = 0, hrank = 0;
  MPI_Comm_size(half, &hsize);
  MPI_Comm_rank(half, &hrank);
  const long long n = 1000 * 1000;
  unsigned char* buf = malloc(n);
  const int root = hsize - 1;
  if (hrank == root)
    fill(buf, n, 40 + rank % 2);
  else
    memset(buf, 0, n);
  MPI_Request req;
  CHECK(MPI_Ibcast(buf, (int)n, MPI_BYTE, root, half, &req) == MPI_SUCCESS, "Ibcast");
  CHECK(MPI_Comm_free(&half) == MPI_SUCCESS, "Comm_free with an Ibcast in flight");
  CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Wait");
  CHECK(!bad_bytes(buf, n, 40 + rank % 2), "half %d", rank % 2);
  free(buf);
}

/* 5 */
static void ibarrier_waits_for_everyone(void) {
  MPI_Request req;
  int token = 0, flag = 1;
  if (rank == 0) {
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    for (int i = 0; i < 20; ++i) {
      MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      if (flag) break;
      sleep_ms(5);
    }
    CHECK(!flag, "Ibarrier complete before rank 1 entered it");
    MPI_Send(&token, 1, MPI_INT, 1, 11, MPI_COMM_WORLD);
  } else {
    if (rank == 1) MPI_Recv(&token, 1, MPI_INT, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
  }
  CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Wait");
  CHECK(req == MPI_REQUEST_NULL, "released");
#ifdef GRIDBCAST_MPI_H
  /* Freeing one is erroneous in MPI: gridbcast's library says so, and the
   * request stays usable (MPICH and Open MPI do not check). */
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  CHECK(MPI_Request_free(&req) == MPI_ERR_REQUEST, "Request_free of an Ibarrier refused");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Wait after the refusal");
#endif
}

static void overlap(long long bytes) {
  unsigned char* buf = malloc(bytes);
  if (rank == 0)
    fill(buf, bytes, 3);
  else
    memset(buf, 0, bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double tb = MPI_Wtime() - t;
  MPI_Bcast(&tb, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD); /* everyone computes as long */
  CHECK(!bad_bytes(buf, bytes, 3), "Bcast");
  if (rank != 0) memset(buf, 0, bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  t = MPI_Wtime();
  MPI_Request req;
  MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
  int flag = 0;
  while (MPI_Wtime() - t < tb) {
    sleep_ms(1);
    if (!flag) MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
  }
  const double tc = MPI_Wtime() - t;
  if (!flag) MPI_Wait(&req, MPI_STATUS_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD);
  const double to = MPI_Wtime() - t;
  CHECK(!bad_bytes(buf, bytes, 3), "Ibcast");
  if (rank == 0)
    printf(
        "overlap: %d ranks, %lld bytes: Bcast %.3f s, computation %.3f s, Ibcast + computation "
        "%.3f s = %.2f x the sum\n",
        size, bytes, tb, tc, to, to / (tb + tc));
  free(buf);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1 && strcmp(argv[1], "overlap") == 0) {
    overlap((argc > 2 ? atoll(argv[2]) : 64) << 20);
  } else {
    const long long big = (argc > 1 ? atoll(argv[1]) : 16) << 20;
    every_root();
    several_in_flight();
    if (size >= 2) send_while_broadcasting(big);
    on_a_subcommunicator();
    if (size >= 2) ibarrier_waits_for_everyone();
  }
  int all = 0;
  MPI_Reduce(&failures, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("ibcast: %d ranks, %d checks, %d failed\n", size, checks, all);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
