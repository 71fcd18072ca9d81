/* The MPI progress rule (issue 26): correct programs in which a message
 * nobody waits for yet is ahead of one somebody does. Each hung forever when
 * every message was pushed eagerly (the receiver stopped reading at its
 * budget, and the later message sat behind the earlier one); MPICH 4.0 and
 * Open MPI 4.1 finish them.
 *   1. rank 0: Isend(BIG -> 1); Barrier; Wait.  rank 1: Barrier; Recv.
 *   2. 4,097 small Isends from 0 to 1 outstanding across a Barrier.
 *   3. Isend(BIG -> 1) before a 1 MiB Bcast from every root.
 *   4. Both directions at once (0 -> 1 and 1 -> 0), then a Barrier.
 *   5. The receive of 1 with MPI_ANY_SOURCE, after the Barrier.
 * BIG is argv[1] in MiB (default 100). Rank 0 prints
 * "progress: N ranks, C checks, F failed"; exit status 0 when all held.
 *
 * `progress deadlock`: an incorrect program, for the launcher's hint: every
 * rank receives from the next one, and nobody sends.
 *
 * `progress memory MIB`: every rank Isends MIB MiB to the next and nobody
 * receives until a Barrier and a second have passed: rank 0 prints the most
 * any rank's resident memory grew meanwhile (what the library holds for
 * unmatched messages; the send buffers are allocated and filled before),
 * as "memory: N ranks, M MiB each unmatched, at most G KiB more resident". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pattern.h"

static int rank, size, checks, failures;

/* 1, 4 and 5: a big Isend ahead of a Barrier, one way or both. */
static void big_before_barrier(long long big, int both, int any_source, int seed) {
  unsigned char* out = malloc(big);
  unsigned char* in = malloc(big);
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Status st;
  if (rank <= 1 && (rank == 0 || both)) {
    fill(out, big, seed + rank);
    MPI_Isend(out, (int)big, MPI_BYTE, 1 - rank, 1, MPI_COMM_WORLD, &req);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank <= 1 && (rank == 1 || both)) {
    memset(in, 0, big);
    const int from = any_source ? MPI_ANY_SOURCE : 1 - rank;
    CHECK(MPI_Recv(in, (int)big, MPI_BYTE, from, 1, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "Recv");
    int count = -1;
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK(count == big && st.MPI_SOURCE == 1 - rank, "count %d from %d", count, st.MPI_SOURCE);
    CHECK(!bad_bytes(in, big, seed + 1 - rank), "bytes");
  }
  CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Wait");
  free(out);
  free(in);
}

/* 2: more small Isends outstanding than the old 4,096-message budget. */
static void many_small_before_barrier(void) {
  enum { kSmall = 4097 };
  static int values[kSmall];
  static MPI_Request reqs[kSmall];
  if (rank == 0)
    for (int i = 0; i < kSmall; ++i) {
      values[i] = i;
      MPI_Isend(&values[i], 1, MPI_INT, 1, 2, MPI_COMM_WORLD, &reqs[i]);
    }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    int wrong = 0;
    for (int i = 0; i < kSmall; ++i) {
      int v = -1;
      MPI_Recv(&v, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      wrong += v != i;
    }
    CHECK(wrong == 0, "%d of %d out of order", wrong, kSmall);
  }
  if (rank == 0) CHECK(MPI_Waitall(kSmall, reqs, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "Waitall");
}

/* 3: a big Isend ahead of broadcasts from every root. */
static void big_before_bcast(long long big) {
  unsigned char* out = malloc(big);
  unsigned char* in = malloc(big);
  const int small = 1 << 20;
  unsigned char* b = malloc(small);
  MPI_Request req = MPI_REQUEST_NULL;
  if (rank == 0) {
    fill(out, big, 40);
    MPI_Isend(out, (int)big, MPI_BYTE, 1, 3, MPI_COMM_WORLD, &req);
  }
  for (int root = 0; root < size; ++root) {
    if (rank == root) fill(b, small, 50 + root);
    MPI_Bcast(b, small, MPI_BYTE, root, MPI_COMM_WORLD);
    CHECK(!bad_bytes(b, small, 50 + root), "bcast from %d", root);
  }
  if (rank == 1) {
    MPI_Recv(in, (int)big, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(!bad_bytes(in, big, 40), "bytes after the broadcasts");
  }
  CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Wait");
  free(out);
  free(in);
  free(b);
}

static long long resident_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atoll(line + 6);
  if (f) fclose(f);
  return kib;
}

static void unmatched_memory(long long bytes) {
  unsigned char* out = malloc(bytes);
  unsigned char* in = malloc(bytes);
  fill(out, bytes, rank);
  memset(in, 0, bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  const long long before = resident_kib();
  MPI_Request req;
  MPI_Isend(out, (int)bytes, MPI_BYTE, (rank + 1) % size, 3, MPI_COMM_WORLD, &req);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 10; ++i) { /* a second in MPI with the sends unmatched */
    int flag = 0;
    MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    usleep(100000);
  }
  long long grew = resident_kib() - before, most = 0;
  MPI_Reduce(&grew, &most, 1, MPI_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Recv(in, (int)bytes, MPI_BYTE, (rank + size - 1) % size, 3, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  CHECK(!bad_bytes(in, bytes, (rank + size - 1) % size), "bytes");
  if (rank == 0)
    printf("memory: %d ranks, %lld MiB each unmatched, at most %lld KiB more resident\n", size,
           bytes >> 20, most);
  free(out);
  free(in);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1 && strcmp(argv[1], "deadlock") == 0) {
    int v = 0;
    MPI_Recv(&v, 1, MPI_INT, (rank + 1) % size, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 1;
  }
  if (argc > 2 && strcmp(argv[1], "memory") == 0) {
    unmatched_memory(atoll(argv[2]) << 20);
  } else if (size >= 2) {
    const long long big = (argc > 1 ? atoll(argv[1]) : 100) << 20;
    big_before_barrier(big, 0, 0, 10);
    many_small_before_barrier();
    big_before_bcast(big);
    big_before_barrier(big, 1, 0, 20);
    big_before_barrier(big, 0, 1, 30);
  }
  int all = 0;
  MPI_Reduce(&failures, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  int total = 0;
  MPI_Reduce(&checks, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("progress: %d ranks, %d checks, %d failed\n", size, total, all);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
