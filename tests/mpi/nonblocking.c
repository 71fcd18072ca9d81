/* Non-blocking point to point and its neighbours, checked (plain MPI):
 * Isend/Irecv/Waitall ring exchanges of 1 B, 64 KiB and 16 MiB with the sends
 * started first and some receives posted late, a pair exchange beyond the
 * receiver's budget for unexpected messages, MPI_ANY_SOURCE with Waitany,
 * Test and Testall polling, Iprobe/Probe + Get_count then Recv, Sendrecv,
 * non-overtaking of Isends with one tag, truncation (MPI_ERR_TRUNCATE,
 * MPI_ERR_IN_STATUS), MPI_PROC_NULL and null requests, Request_free.
 * Rank 0 prints "nonblocking: N ranks, C checks, F failed"; exit status 0
 * when every check held on every rank. Plain MPI: Open MPI 4.1 passes it too.
 *
 * `nonblocking stall`: rank 0 waits for a message rank 1 never sends (the
 * others sleep 30 s), for the --timeout test. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static int rank, size, checks, failures;

static unsigned char pattern(long long i, int from, int seed) {
  return (unsigned char)((i * 131 + from * 17 + seed * 7 + (i >> 11)) & 0xff);
}

static void fill(unsigned char* b, long long n, int from, int seed) {
  for (long long i = 0; i < n; ++i) b[i] = pattern(i, from, seed);
}

static int bad_bytes(const unsigned char* b, long long n, int from, int seed) {
  for (long long i = 0; i < n; ++i)
    if (b[i] != pattern(i, from, seed)) return 1;
  return 0;
}

/* Every rank sends to the right and receives from the left; sends first, and
 * the odd ranks post their receive 200 ms late. */
static void ring(long long bytes, int seed) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  unsigned char* out = malloc(bytes);
  unsigned char* in = malloc(bytes);
  fill(out, bytes, rank, seed);
  memset(in, 0xee, bytes);
  MPI_Request reqs[2];
  MPI_Status st[2];
  MPI_Isend(out, (int)bytes, MPI_BYTE, right, 1, MPI_COMM_WORLD, &reqs[0]);
  if (rank % 2) usleep(200 * 1000);
  MPI_Irecv(in, (int)bytes, MPI_BYTE, left, 1, MPI_COMM_WORLD, &reqs[1]);
  int rc = MPI_Waitall(2, reqs, st);
  int count = -1;
  MPI_Get_count(&st[1], MPI_BYTE, &count);
  CHECK(rc == MPI_SUCCESS && reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL,
        "ring of %lld bytes: rc %d", bytes, rc);
  CHECK(st[1].MPI_SOURCE == left && st[1].MPI_TAG == 1 && st[1].MPI_ERROR == MPI_SUCCESS &&
            count == (int)bytes,
        "ring of %lld bytes: status source %d tag %d error %d count %d", bytes, st[1].MPI_SOURCE,
        st[1].MPI_TAG, st[1].MPI_ERROR, count);
  CHECK(!bad_bytes(in, bytes, left, seed), "ring of %lld bytes: data from rank %d", bytes, left);
  free(out);
  free(in);
}

/* Ranks 0 and 1 exchange 72 MiB each way, both Isend first and post the
 * receive 300 ms later: more than a receiver holds for unexpected messages,
 * so the senders are held back until the receives are posted. */
static void big_pair(void) {
  const long long bytes = 72ll << 20;
  if (rank > 1 || size < 2) return;
  const int peer = 1 - rank;
  unsigned char* out = malloc(bytes);
  unsigned char* in = malloc(bytes);
  fill(out, bytes, rank, 9);
  MPI_Request reqs[2];
  MPI_Isend(out, (int)bytes, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[0]);
  usleep(300 * 1000);
  MPI_Irecv(in, (int)bytes, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[1]);
  int rc = MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
  CHECK(rc == MPI_SUCCESS && !bad_bytes(in, bytes, peer, 9), "72 MiB exchange: rc %d", rc);
  free(out);
  free(in);
}

/* Rank 0 receives one int from every other rank with MPI_ANY_SOURCE. */
static void any_source(void) {
  if (rank != 0) {
    int v = rank * 10;
    usleep((unsigned)(size - rank) * 20 * 1000); /* arrive in some order */
    MPI_Send(&v, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
    return;
  }
  const int n = size - 1;
  int* vals = calloc(n + 1, sizeof(int));
  int* seen = calloc(size, sizeof(int));
  MPI_Request* reqs = malloc((n + 1) * sizeof(MPI_Request));
  for (int i = 0; i < n; ++i)
    MPI_Irecv(&vals[i], 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &reqs[i]);
  for (int k = 0; k < n; ++k) {
    int index = -1, count = -1;
    MPI_Status st;
    int rc = MPI_Waitany(n, reqs, &index, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(rc == MPI_SUCCESS && index >= 0 && index < n && reqs[index] == MPI_REQUEST_NULL,
          "Waitany: rc %d index %d", rc, index);
    if (index < 0 || index >= n) break;
    CHECK(st.MPI_SOURCE >= 1 && st.MPI_SOURCE < size && st.MPI_TAG == 7 && count == 1 &&
              vals[index] == st.MPI_SOURCE * 10 && !seen[st.MPI_SOURCE],
          "Waitany: source %d tag %d count %d value %d", st.MPI_SOURCE, st.MPI_TAG, count,
          vals[index]);
    if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < size) seen[st.MPI_SOURCE] = 1;
  }
  int index = 5;
  int rc = MPI_Waitany(n, reqs, &index, MPI_STATUS_IGNORE);
  CHECK(rc == MPI_SUCCESS && index == MPI_UNDEFINED, "Waitany of null requests: index %d", index);
  free(vals);
  free(seen);
  free(reqs);
}

/* Rank 1 sends 100 ms late; rank 0 polls with MPI_Test, then MPI_Testall. */
static void test_polling(void) {
  if (rank == 1) {
    int v[2] = {41, 42};
    usleep(100 * 1000);
    MPI_Send(&v[0], 1, MPI_INT, 0, 8, MPI_COMM_WORLD);
    usleep(50 * 1000);
    MPI_Send(&v[1], 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
    MPI_Send(&v[1], 1, MPI_INT, 0, 10, MPI_COMM_WORLD);
  }
  if (rank != 0) return;
  int got = 0, flag = 0;
  long polls = 0;
  MPI_Request req;
  MPI_Status st;
  MPI_Irecv(&got, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, &req);
  while (!flag) {
    MPI_Test(&req, &flag, &st);
    ++polls;
  }
  CHECK(got == 41 && polls > 1 && req == MPI_REQUEST_NULL && st.MPI_SOURCE == 1 && st.MPI_TAG == 8,
        "MPI_Test: value %d after %ld polls", got, polls);
  int two[2] = {0, 0};
  MPI_Request reqs[2];
  MPI_Irecv(&two[0], 1, MPI_INT, 1, 9, MPI_COMM_WORLD, &reqs[0]);
  MPI_Irecv(&two[1], 1, MPI_INT, 1, 10, MPI_COMM_WORLD, &reqs[1]);
  flag = 0;
  polls = 0;
  while (!flag) {
    MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE);
    ++polls;
  }
  CHECK(two[0] == 42 && two[1] == 42 && reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL,
        "MPI_Testall: %d %d after %ld polls", two[0], two[1], polls);
  MPI_Request null = MPI_REQUEST_NULL;
  flag = 0;
  int rc = MPI_Test(&null, &flag, &st);
  CHECK(rc == MPI_SUCCESS && flag == 1 && st.MPI_SOURCE == MPI_ANY_SOURCE,
        "MPI_Test of MPI_REQUEST_NULL");
}

/* Every rank sends 100 + rank ints to the right with tag 20 + rank; the
 * receiver finds it with Iprobe (any source, any tag) and Probe, sizes the
 * buffer with Get_count, then receives. */
static void probing(void) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  const int n = 100 + rank;
  int* out = malloc(n * sizeof(int));
  for (int i = 0; i < n; ++i) out[i] = rank * 1000 + i;
  MPI_Request req;
  MPI_Isend(out, n, MPI_INT, right, 20 + rank, MPI_COMM_WORLD, &req);
  int flag = 0;
  MPI_Status st;
  while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
  int count = -1;
  MPI_Get_count(&st, MPI_INT, &count);
  CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 20 + left && count == 100 + left,
        "Iprobe: source %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG, count);
  MPI_Status st2;
  int rc = MPI_Probe(left, 20 + left, MPI_COMM_WORLD, &st2);
  int count2 = -1;
  MPI_Get_count(&st2, MPI_INT, &count2);
  CHECK(rc == MPI_SUCCESS && st2.MPI_SOURCE == left && count2 == 100 + left,
        "Probe: source %d count %d", st2.MPI_SOURCE, count2);
  int* in = malloc((count2 > 0 ? count2 : 1) * sizeof(int));
  MPI_Recv(in, count2, MPI_INT, st2.MPI_SOURCE, st2.MPI_TAG, MPI_COMM_WORLD, &st);
  int bad = 0;
  for (int i = 0; i < count2; ++i) bad |= in[i] != left * 1000 + i;
  CHECK(!bad, "the probed message's data");
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  /* (Any tag: a neighbour may be on to the next phase's message already.) */
  flag = 1;
  MPI_Iprobe(MPI_ANY_SOURCE, 20 + left, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
  CHECK(flag == 0, "Iprobe with nothing pending");
  free(out);
  free(in);
}

/* A ring shift of 1 MiB with MPI_Sendrecv, and one with MPI_PROC_NULL ends. */
static void sendrecv(void) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  const long long bytes = 1 << 20;
  unsigned char* out = malloc(bytes);
  unsigned char* in = malloc(bytes);
  fill(out, bytes, rank, 5);
  MPI_Status st;
  int rc = MPI_Sendrecv(out, (int)bytes, MPI_BYTE, right, 30, in, (int)bytes, MPI_BYTE, left, 30,
                        MPI_COMM_WORLD, &st);
  int count = -1;
  MPI_Get_count(&st, MPI_BYTE, &count);
  CHECK(rc == MPI_SUCCESS && st.MPI_SOURCE == left && st.MPI_TAG == 30 && count == (int)bytes &&
            !bad_bytes(in, bytes, left, 5),
        "Sendrecv: rc %d source %d count %d", rc, st.MPI_SOURCE, count);
  /* A line: the ends send to or receive from MPI_PROC_NULL. */
  const int to = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;
  const int from = rank > 0 ? rank - 1 : MPI_PROC_NULL;
  int v = rank, w = -5;
  rc = MPI_Sendrecv(&v, 1, MPI_INT, to, 31, &w, 1, MPI_INT, from, 31, MPI_COMM_WORLD, &st);
  MPI_Get_count(&st, MPI_INT, &count);
  CHECK(rc == MPI_SUCCESS && (rank == 0 ? w == -5 && st.MPI_SOURCE == MPI_PROC_NULL && count == 0
                                        : w == rank - 1 && st.MPI_SOURCE == rank - 1),
        "Sendrecv with MPI_PROC_NULL: %d from %d", w, st.MPI_SOURCE);
  free(out);
  free(in);
}

/* Rank 0 sends ten messages with one tag to rank 1, small and large mixed;
 * they arrive in the order sent, to non-blocking and blocking receives. */
static void ordering(void) {
  enum { kMessages = 10 };
  const int sizes[kMessages] = {4, 3 << 20, 4, 4, 1 << 20, 4, 5 << 20, 4, 64, 4};
  if (rank == 0) {
    MPI_Request reqs[kMessages];
    int* bufs[kMessages];
    for (int i = 0; i < kMessages; ++i) {
      bufs[i] = malloc(sizes[i]);
      for (int j = 0; j < sizes[i] / 4; ++j) bufs[i][j] = i * 100 + (j & 63);
      MPI_Isend(bufs[i], sizes[i] / 4, MPI_INT, 1, 40, MPI_COMM_WORLD, &reqs[i]);
    }
    MPI_Waitall(kMessages, reqs, MPI_STATUSES_IGNORE);
    for (int i = 0; i < kMessages; ++i) free(bufs[i]);
  } else if (rank == 1) {
    usleep(100 * 1000); /* some arrive before their receive is posted */
    const int max = 5 << 20;
    int* bufs[kMessages];
    MPI_Request reqs[kMessages];
    for (int i = 0; i < kMessages; ++i) bufs[i] = malloc(max);
    /* The first six non-blocking (ANY_TAG for some), then blocking. */
    for (int i = 0; i < 6; ++i)
      MPI_Irecv(bufs[i], max / 4, MPI_INT, 0, i % 2 ? MPI_ANY_TAG : 40, MPI_COMM_WORLD, &reqs[i]);
    for (int i = 6; i < kMessages; ++i)
      MPI_Recv(bufs[i], max / 4, MPI_INT, MPI_ANY_SOURCE, 40, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Waitall(6, reqs, MPI_STATUSES_IGNORE);
    int bad = -1;
    for (int i = 0; i < kMessages && bad < 0; ++i)
      for (int j = 0; j < sizes[i] / 4; ++j)
        if (bufs[i][j] != i * 100 + (j & 63)) {
          bad = i;
          break;
        }
    CHECK(bad < 0, "message %d of ten with one tag arrived out of order", bad);
    for (int i = 0; i < kMessages; ++i) free(bufs[i]);
  }
}

/* A message longer than the receive: MPI_ERR_TRUNCATE from MPI_Wait,
 * MPI_ERR_IN_STATUS from MPI_Waitall, under MPI_ERRORS_RETURN. */
static void truncation(void) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int big[100];
  for (int i = 0; i < 100; ++i) big[i] = i;
  if (rank == 0) {
    MPI_Send(big, 100, MPI_INT, 1, 50, comm);
    MPI_Send(big, 100, MPI_INT, 1, 51, comm);
  } else if (rank == 1) {
    int small[10];
    MPI_Request req;
    MPI_Status st;
    MPI_Irecv(small, 10, MPI_INT, 0, 50, comm, &req);
    int rc = MPI_Wait(&req, &st), cls = -1;
    MPI_Error_class(rc, &cls);
    /* The count of a truncated receive differs between MPIs (Open MPI: the
     * message's length, MPICH 4: 0, gridbcast: the buffer's): not checked. */
    CHECK(cls == MPI_ERR_TRUNCATE && small[9] == 9 && st.MPI_SOURCE == 0 && st.MPI_TAG == 50 &&
              req == MPI_REQUEST_NULL,
          "Wait on a truncated message: class %d", cls);
    MPI_Request reqs[2];
    MPI_Status sts[2];
    int ok = -1;
    MPI_Irecv(small, 10, MPI_INT, 0, 51, comm, &reqs[0]);
    MPI_Isend(&ok, 1, MPI_INT, 1, 52, comm, &reqs[1]);
    rc = MPI_Waitall(2, reqs, sts);
    CHECK(rc == MPI_ERR_IN_STATUS && sts[0].MPI_ERROR == MPI_ERR_TRUNCATE &&
              sts[1].MPI_ERROR == MPI_SUCCESS,
          "Waitall with a truncated message: rc %d errors %d %d", rc, sts[0].MPI_ERROR,
          sts[1].MPI_ERROR);
    MPI_Recv(&ok, 1, MPI_INT, 1, 52, comm, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&comm);
}

/* MPI_PROC_NULL requests, Request_free of an active send, self messages. */
static void odds_and_ends(void) {
  MPI_Request reqs[3];
  MPI_Status st;
  int v = 0;
  MPI_Isend(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &reqs[0]);
  MPI_Irecv(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &reqs[1]);
  MPI_Wait(&reqs[1], &st);
  CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG, "receive from MPI_PROC_NULL");
  MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
  CHECK(reqs[0] == MPI_REQUEST_NULL, "send to MPI_PROC_NULL");
  /* To itself, receive posted after the send. */
  int self_out = 77 + rank, self_in = 0;
  MPI_Isend(&self_out, 1, MPI_INT, rank, 60, MPI_COMM_WORLD, &reqs[0]);
  MPI_Irecv(&self_in, 1, MPI_INT, rank, 60, MPI_COMM_WORLD, &reqs[1]);
  MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
  CHECK(self_in == 77 + rank, "a message to itself");
  /* A freed send still arrives. */
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  static int freed_out;
  freed_out = 500 + rank;
  int freed_in = 0;
  MPI_Isend(&freed_out, 1, MPI_INT, right, 61, MPI_COMM_WORLD, &reqs[2]);
  MPI_Request_free(&reqs[2]);
  CHECK(reqs[2] == MPI_REQUEST_NULL, "Request_free sets MPI_REQUEST_NULL");
  MPI_Recv(&freed_in, 1, MPI_INT, left, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CHECK(freed_in == 500 + left, "a freed send arrived: %d", freed_in);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1 && strcmp(argv[1], "stall") == 0) {
    int v = 0;
    MPI_Request req;
    if (rank == 0) {
      MPI_Irecv(&v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, &req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
      sleep(30); /* rank 1 never sends; the others stay out of MPI calls */
    }
    MPI_Finalize();
    return 0;
  }
  const long long sizes[] = {1, 64 << 10, 16 << 20};
  for (int k = 0; k < 3; ++k) ring(sizes[k], k);
  big_pair();
  MPI_Barrier(MPI_COMM_WORLD);
  if (size >= 2) {
    any_source();
    MPI_Barrier(MPI_COMM_WORLD);
    test_polling();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  probing();
  sendrecv();
  MPI_Barrier(MPI_COMM_WORLD);
  if (size >= 2) {
    ordering();
    MPI_Barrier(MPI_COMM_WORLD);
    truncation();
  }
  odds_and_ends();
  int all_failures = 0, all_checks = 0;
  MPI_Reduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&checks, &all_checks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("nonblocking: %d ranks, %d checks, %d failed\n", size, all_checks, all_failures);
  MPI_Finalize();
  return all_failures == 0 ? 0 : 1;
}
