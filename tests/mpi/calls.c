/* Every call of gridbcast's MPI subset, checked. Plain MPI: the same source
 * builds against gridbcast's mpi.h (run under `gridbcast launch TOPOLOGY --`)
 * and against Open MPI and MPICH, and prints the same lines under all three
 * (rank 0 prints; every check's outcome is reduced over the ranks).
 * Exit status 0 when every check held on every rank. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pattern.h"

static int rank, size, checks, failures;

/* Every root, several sizes and types, on one communicator. */
static void bcasts_everywhere(MPI_Comm comm, const char* what, int seed) {
  int r, n;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  const long long sizes[] = {0, 1, 7, 4096, 65536 + 3, (1 << 20) + 5};
  unsigned char* buf = malloc((1 << 20) + 5);
  for (int root = 0; root < n; ++root) {
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
      const long long bytes = sizes[k];
      for (long long i = 0; i < bytes; ++i) buf[i] = r == root ? pattern(i, seed + root) : 0xee;
      int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, comm);
      int bad = 0;
      for (long long i = 0; i < bytes; ++i) bad |= buf[i] != pattern(i, seed + root);
      CHECK(rc == MPI_SUCCESS && !bad, "%s: MPI_Bcast of %lld bytes from root %d", what, bytes,
            root);
    }
    /* Typed: ints and doubles. */
    int ints[1000];
    double doubles[333];
    for (int i = 0; i < 1000; ++i) ints[i] = r == root ? i * 3 - root : -1;
    for (int i = 0; i < 333; ++i) doubles[i] = r == root ? i * 0.25 + root : -1;
    MPI_Bcast(ints, 1000, MPI_INT, root, comm);
    MPI_Bcast(doubles, 333, MPI_DOUBLE, root, comm);
    int bad = 0;
    for (int i = 0; i < 1000; ++i) bad |= ints[i] != i * 3 - root;
    for (int i = 0; i < 333; ++i) bad |= doubles[i] != i * 0.25 + root;
    CHECK(!bad, "%s: typed MPI_Bcast from root %d", what, root);
  }
  free(buf);
}

/* MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX over a type, by MPI_Reduce (every root,
 * with and without MPI_IN_PLACE) and MPI_Allreduce (with and without). */
#define REDUCTIONS(T, DT)                                                              \
  static int same_##T(const T* a, const T* b) {                                        \
    return a[0] == b[0] && a[1] == b[1] && a[2] == b[2];                               \
  }                                                                                    \
  static void reductions_##T(MPI_Comm comm) {                                          \
    int r, n;                                                                          \
    MPI_Comm_rank(comm, &r);                                                           \
    MPI_Comm_size(comm, &n);                                                           \
    const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};                        \
    const char* names[] = {"sum", "prod", "min", "max"};                               \
    for (int o = 0; o < 4; ++o) {                                                      \
      T mine[3], want[3], got[3];                                                      \
      for (int k = 0; k < 3; ++k) {                                                    \
        mine[k] = (T)((r + 1 + k) % 3 + 1);                                            \
        for (int q = 0; q < n; ++q) {                                                  \
          T v = (T)((q + 1 + k) % 3 + 1);                                              \
          if (q == 0)                                                                  \
            want[k] = v;                                                               \
          else if (o == 0)                                                             \
            want[k] = (T)(want[k] + v);                                                \
          else if (o == 1)                                                             \
            want[k] = (T)(want[k] * v);                                                \
          else if (o == 2)                                                             \
            want[k] = v < want[k] ? v : want[k];                                       \
          else                                                                         \
            want[k] = v > want[k] ? v : want[k];                                       \
        }                                                                              \
      }                                                                                \
      for (int root = 0; root < n; ++root) {                                           \
        got[0] = got[1] = got[2] = 0;                                                  \
        MPI_Reduce(mine, got, 3, DT, ops[o], root, comm);                              \
        if (r == root) CHECK(same_##T(got, want), "reduce %s " #T, names[o]);          \
        memcpy(got, mine, sizeof got);                                                 \
        MPI_Reduce(r == root ? MPI_IN_PLACE : mine, got, 3, DT, ops[o], root, comm);   \
        if (r == root) CHECK(same_##T(got, want), "in-place reduce %s " #T, names[o]); \
      }                                                                                \
      got[0] = got[1] = got[2] = 0;                                                    \
      MPI_Allreduce(mine, got, 3, DT, ops[o], comm);                                   \
      CHECK(same_##T(got, want), "allreduce %s " #T, names[o]);                        \
      memcpy(got, mine, sizeof got);                                                   \
      MPI_Allreduce(MPI_IN_PLACE, got, 3, DT, ops[o], comm);                           \
      CHECK(same_##T(got, want), "in-place allreduce %s " #T, names[o]);               \
    }                                                                                  \
  }

typedef signed char schar;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned long ulong;
typedef long long llong;
typedef unsigned long long ullong;
typedef long double ldouble;
REDUCTIONS(schar, MPI_SIGNED_CHAR)
REDUCTIONS(uchar, MPI_UNSIGNED_CHAR)
REDUCTIONS(short, MPI_SHORT)
REDUCTIONS(ushort, MPI_UNSIGNED_SHORT)
REDUCTIONS(int, MPI_INT)
REDUCTIONS(unsigned, MPI_UNSIGNED)
REDUCTIONS(long, MPI_LONG)
REDUCTIONS(ulong, MPI_UNSIGNED_LONG)
REDUCTIONS(llong, MPI_LONG_LONG)
REDUCTIONS(ullong, MPI_UNSIGNED_LONG_LONG)
REDUCTIONS(float, MPI_FLOAT)
REDUCTIONS(double, MPI_DOUBLE)
REDUCTIONS(ldouble, MPI_LONG_DOUBLE)
REDUCTIONS(int8_t, MPI_INT8_T)
REDUCTIONS(int16_t, MPI_INT16_T)
REDUCTIONS(int32_t, MPI_INT32_T)
REDUCTIONS(int64_t, MPI_INT64_T)
REDUCTIONS(uint8_t, MPI_UINT8_T)
REDUCTIONS(uint16_t, MPI_UINT16_T)
REDUCTIONS(uint32_t, MPI_UINT32_T)
REDUCTIONS(uint64_t, MPI_UINT64_T)

static void all_reductions(MPI_Comm comm) {
  reductions_schar(comm);
  reductions_uchar(comm);
  reductions_short(comm);
  reductions_ushort(comm);
  reductions_int(comm);
  reductions_unsigned(comm);
  reductions_long(comm);
  reductions_ulong(comm);
  reductions_llong(comm);
  reductions_ullong(comm);
  reductions_float(comm);
  reductions_double(comm);
  reductions_ldouble(comm);
  reductions_int8_t(comm);
  reductions_int16_t(comm);
  reductions_int32_t(comm);
  reductions_int64_t(comm);
  reductions_uint8_t(comm);
  reductions_uint16_t(comm);
  reductions_uint32_t(comm);
  reductions_uint64_t(comm);
}

static void gathers(MPI_Comm comm) {
  int r, n;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  for (int root = 0; root < n; ++root) {
    int mine[2] = {r * 10, r * 10 + 1};
    int* all = malloc(sizeof(int) * 2 * (size_t)n);
    for (int i = 0; i < 2 * n; ++i) all[i] = -1;
    MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, root, comm);
    int bad = 0;
    if (r == root)
      for (int q = 0; q < n; ++q) bad |= all[2 * q] != q * 10 || all[2 * q + 1] != q * 10 + 1;
    CHECK(!bad, "gather to root %d", root);
    for (int i = 0; i < 2 * n; ++i) all[i] = -1;
    if (r == root) {
      all[2 * r] = mine[0];
      all[2 * r + 1] = mine[1];
    }
    MPI_Gather(r == root ? MPI_IN_PLACE : mine, 2, MPI_INT, all, 2, MPI_INT, root, comm);
    bad = 0;
    if (r == root)
      for (int q = 0; q < n; ++q) bad |= all[2 * q] != q * 10 || all[2 * q + 1] != q * 10 + 1;
    CHECK(!bad, "in-place gather to root %d", root);
    free(all);
  }
}

static void point_to_point(void) {
  /* A ring with tags, then any-source and any-tag receives at rank 0. */
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  int out[4] = {rank, rank + 1, rank + 2, rank + 3}, in[4] = {0};
  MPI_Status st;
  if (rank % 2 == 0) {
    MPI_Send(out, 4, MPI_INT, next, 5, MPI_COMM_WORLD);
    MPI_Recv(in, 4, MPI_INT, prev, 5, MPI_COMM_WORLD, &st);
  } else {
    MPI_Recv(in, 4, MPI_INT, prev, 5, MPI_COMM_WORLD, &st);
    MPI_Send(out, 4, MPI_INT, next, 5, MPI_COMM_WORLD);
  }
  int count = -1;
  MPI_Get_count(&st, MPI_INT, &count);
  CHECK(
      in[0] == prev && in[3] == prev + 3 && st.MPI_SOURCE == prev && st.MPI_TAG == 5 && count == 4,
      "ring: got %d from %d tag %d count %d", in[0], st.MPI_SOURCE, st.MPI_TAG, count);
  if (rank != 0) {
    double v = rank * 1.5;
    MPI_Send(&v, 1, MPI_DOUBLE, 0, 100 + rank, MPI_COMM_WORLD);
  } else {
    int seen = 0;
    for (int k = 1; k < size; ++k) {
      double v = 0;
      MPI_Recv(&v, 1, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      seen += v == st.MPI_SOURCE * 1.5 && st.MPI_TAG == 100 + st.MPI_SOURCE;
    }
    CHECK(seen == size - 1, "any-source receives matched %d of %d", seen, size - 1);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* nothing of the next phase may match MPI_ANY_TAG above */
  /* Order between one sender and one receiver is kept. */
  if (size < 2) {
    ++checks;
  } else if (rank == 1) {
    for (int k = 0; k < 20; ++k) MPI_Send(&k, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
  } else if (rank == 0) {
    int in_order = 1;
    for (int k = 0; k < 20; ++k) {
      int v = -1;
      MPI_Recv(&v, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      in_order &= v == k;
    }
    CHECK(in_order, "messages from one sender arrive in order");
  }
  /* MPI_PROC_NULL is a no-op. */
  CHECK(MPI_Send(out, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD) == MPI_SUCCESS,
        "send to MPI_PROC_NULL");
  CHECK(MPI_Recv(in, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st) == MPI_SUCCESS &&
            st.MPI_SOURCE == MPI_PROC_NULL,
        "receive from MPI_PROC_NULL");
  /* A large message. */
  const int big = 3 << 20;
  char* buf = malloc(big);
  if (rank == 0) {
    for (int i = 0; i < big; ++i) buf[i] = (char)(i % 251);
    MPI_Send(buf, big, MPI_CHAR, size - 1, 9, MPI_COMM_WORLD);
  } else if (rank == size - 1) {
    MPI_Recv(buf, big, MPI_CHAR, 0, 9, MPI_COMM_WORLD, &st);
    int bad = 0;
    for (int i = 0; i < big; ++i) bad |= buf[i] != (char)(i % 251);
    CHECK(!bad, "3 MiB message");
  }
  free(buf);
}

static void datatypes(void) {
  const MPI_Datatype types[] = {MPI_CHAR,
                                MPI_SIGNED_CHAR,
                                MPI_UNSIGNED_CHAR,
                                MPI_BYTE,
                                MPI_SHORT,
                                MPI_UNSIGNED_SHORT,
                                MPI_INT,
                                MPI_UNSIGNED,
                                MPI_LONG,
                                MPI_UNSIGNED_LONG,
                                MPI_LONG_LONG_INT,
                                MPI_LONG_LONG,
                                MPI_UNSIGNED_LONG_LONG,
                                MPI_FLOAT,
                                MPI_DOUBLE,
                                MPI_LONG_DOUBLE,
                                MPI_INT8_T,
                                MPI_INT16_T,
                                MPI_INT32_T,
                                MPI_INT64_T,
                                MPI_UINT8_T,
                                MPI_UINT16_T,
                                MPI_UINT32_T,
                                MPI_UINT64_T,
                                MPI_WCHAR,
                                MPI_C_BOOL,
                                MPI_AINT};
  const int sizes[] = {1,
                       1,
                       1,
                       1,
                       sizeof(short),
                       sizeof(short),
                       sizeof(int),
                       sizeof(int),
                       sizeof(long),
                       sizeof(long),
                       sizeof(long long),
                       sizeof(long long),
                       sizeof(long long),
                       sizeof(float),
                       sizeof(double),
                       sizeof(long double),
                       1,
                       2,
                       4,
                       8,
                       1,
                       2,
                       4,
                       8,
                       sizeof(wchar_t),
                       sizeof(_Bool),
                       sizeof(MPI_Aint)};
  int bad = 0;
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i) {
    int s = -1;
    MPI_Type_size(types[i], &s);
    bad |= s != sizes[i];
  }
  CHECK(!bad, "MPI_Type_size of the basic types");
  /* Contiguous types, nested, in broadcasts and reductions. */
  MPI_Datatype three_ints, six_ints;
  MPI_Type_contiguous(3, MPI_INT, &three_ints);
  MPI_Type_contiguous(2, three_ints, &six_ints);
  MPI_Type_commit(&six_ints);
  int s = 0;
  MPI_Type_size(six_ints, &s);
  CHECK(s == 6 * (int)sizeof(int), "size of contiguous(2, contiguous(3, int)) is %d", s);
  int v[12];
  for (int i = 0; i < 12; ++i) v[i] = rank == size - 1 ? i * i : 0;
  MPI_Bcast(v, 2, six_ints, size - 1, MPI_COMM_WORLD);
  int ok = 1;
  for (int i = 0; i < 12; ++i) ok &= v[i] == i * i;
  CHECK(ok, "broadcast of a contiguous type");
  MPI_Status st;
  if (rank == 0) MPI_Send(v, 2, six_ints, size - 1, 3, MPI_COMM_WORLD);
  if (rank == size - 1) {
    MPI_Recv(v, 2, six_ints, 0, 3, MPI_COMM_WORLD, &st);
    int c = -1;
    MPI_Get_count(&st, six_ints, &c);
    int ci = -1;
    MPI_Get_count(&st, MPI_INT, &ci);
    CHECK(c == 2 && ci == 12, "MPI_Get_count %d %d", c, ci);
  }
  MPI_Type_free(&six_ints);
  MPI_Type_free(&three_ints);
  CHECK(six_ints == MPI_DATATYPE_NULL, "MPI_Type_free sets MPI_DATATYPE_NULL");
}

static int error_class_of(int rc) {
  int cls = -1;
  MPI_Error_class(rc, &cls);
  return cls;
}

static void errors(void) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Errhandler h;
  MPI_Comm_get_errhandler(comm, &h);
  CHECK(h == MPI_ERRORS_RETURN, "MPI_Comm_get_errhandler");
  MPI_Errhandler_free(&h);
  int x[4] = {0};
  int rc = MPI_Send(x, 1, MPI_INT, size + 3, 0, comm);
  CHECK(error_class_of(rc) == MPI_ERR_RANK, "send to rank %d: class %d", size + 3,
        error_class_of(rc));
  rc = MPI_Send(x, -1, MPI_INT, 0, 0, comm);
  CHECK(error_class_of(rc) == MPI_ERR_COUNT, "negative count: class %d", error_class_of(rc));
  rc = MPI_Send(x, 1, MPI_INT, 0, -5, comm);
  CHECK(error_class_of(rc) == MPI_ERR_TAG, "negative tag: class %d", error_class_of(rc));
  rc = MPI_Send(x, 1, MPI_DATATYPE_NULL, 0, 0, comm);
  CHECK(error_class_of(rc) == MPI_ERR_TYPE, "MPI_DATATYPE_NULL: class %d", error_class_of(rc));
  rc = MPI_Bcast(x, 1, MPI_INT, size, comm);
  CHECK(error_class_of(rc) == MPI_ERR_ROOT, "root %d: class %d", size, error_class_of(rc));
  rc = MPI_Bcast(x, 1, MPI_INT, 0, MPI_COMM_NULL);
  CHECK(error_class_of(rc) == MPI_ERR_COMM, "MPI_COMM_NULL: class %d", error_class_of(rc));
#ifdef GRIDBCAST_MPI /* Open MPI sums bytes; MPICH and the standard do not */
  rc = MPI_Allreduce(x, x + 1, 1, MPI_BYTE, MPI_SUM, comm);
  CHECK(error_class_of(rc) == MPI_ERR_OP, "MPI_SUM over MPI_BYTE: class %d", error_class_of(rc));
#else
  ++checks;
#endif
  /* Predefined operations take predefined datatypes only. */
  MPI_Datatype pair;
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_commit(&pair);
  rc = MPI_Allreduce(x, x + 2, 1, pair, MPI_SUM, comm);
  CHECK(error_class_of(rc) == MPI_ERR_OP, "MPI_SUM over a derived datatype: class %d",
        error_class_of(rc));
  MPI_Type_free(&pair);
  MPI_Comm world = MPI_COMM_WORLD;
  rc = MPI_Comm_free(&world);
  CHECK(rc != MPI_SUCCESS, "freeing MPI_COMM_WORLD fails");
  /* Truncation: rank 0 sends 4 ints to a buffer of 2. */
  MPI_Status st;
  if (rank == 0) MPI_Send(x, 4, MPI_INT, size - 1, 1, comm);
  if (rank == size - 1) {
    rc = MPI_Recv(x, 2, MPI_INT, 0, 1, comm, &st);
    CHECK(error_class_of(rc) == MPI_ERR_TRUNCATE, "truncation: class %d", error_class_of(rc));
  }
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(MPI_ERR_RANK, text, &len);
  CHECK(len > 0 && (int)strlen(text) == len, "MPI_Error_string");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_free(&comm);
  CHECK(comm == MPI_COMM_NULL, "MPI_Comm_free sets MPI_COMM_NULL");
}

int main(int argc, char** argv) {
  int flag = -1;
  MPI_Initialized(&flag);
  int before = flag;
  int provided = -1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(before == 0, "MPI_Initialized before MPI_Init");
  MPI_Initialized(&flag);
  CHECK(flag == 1, "MPI_Initialized");
  MPI_Finalized(&flag);
  CHECK(flag == 0, "MPI_Finalized before MPI_Finalize");
  int queried = -1;
  MPI_Query_thread(&queried);
  CHECK(provided >= MPI_THREAD_FUNNELED && queried == provided, "thread level %d %d", provided,
        queried);
  int version = 0, subversion = -1;
  MPI_Get_version(&version, &subversion);
  CHECK(version >= 3 && subversion >= 0, "MPI_Get_version %d.%d", version, subversion);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  CHECK(len > 0 && (int)strlen(name) == len, "MPI_Get_processor_name");
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Get_library_version(lib, &len);
  CHECK(len > 0, "MPI_Get_library_version");
  const double t0 = MPI_Wtime();
  CHECK(MPI_Wtick() > 0 && MPI_Wtick() < 1, "MPI_Wtick %g", MPI_Wtick());
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(MPI_Wtime() >= t0, "MPI_Wtime is monotonic");

  bcasts_everywhere(MPI_COMM_WORLD, "world", 1);
  MPI_Comm dup, halves, reversed, quarter;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &halves);
  MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &reversed);
  MPI_Comm_split(halves, rank < size / 2 ? 0 : MPI_UNDEFINED, 0, &quarter);
  int hr, hs, rr;
  MPI_Comm_rank(halves, &hr);
  MPI_Comm_size(halves, &hs);
  MPI_Comm_rank(reversed, &rr);
  CHECK(hr == rank / 2 && hs == (size + 1 - rank % 2) / 2, "split by parity: rank %d of %d", hr,
        hs);
  CHECK(rr == size - 1 - rank, "split with reversed keys: rank %d", rr);
  CHECK((rank < size / 2) == (quarter != MPI_COMM_NULL), "MPI_UNDEFINED gives MPI_COMM_NULL");
  bcasts_everywhere(dup, "dup", 2);
  bcasts_everywhere(halves, "halves", 3);
  bcasts_everywhere(reversed, "reversed", 4);
  if (quarter != MPI_COMM_NULL) bcasts_everywhere(quarter, "quarter", 5);
  /* Interleaved communicators keep their own order. */
  for (int k = 0; k < 10; ++k) {
    int a = rank == 0 ? k : -1, b = hr == 0 ? k + 100 : -1;
    MPI_Bcast(&a, 1, MPI_INT, 0, dup);
    MPI_Bcast(&b, 1, MPI_INT, 0, halves);
    CHECK(a == k && b == k + 100, "interleaved broadcasts");
  }
  all_reductions(MPI_COMM_WORLD);
  all_reductions(reversed);
  all_reductions(MPI_COMM_SELF);
  gathers(MPI_COMM_WORLD);
  gathers(halves);
  point_to_point();
  datatypes();
  errors();
  if (quarter != MPI_COMM_NULL) MPI_Comm_free(&quarter);
  MPI_Comm_free(&reversed);
  MPI_Comm_free(&halves);
  MPI_Comm_free(&dup);

  int total_failures = 0, total_checks = 0;
  MPI_Reduce(&failures, &total_failures, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&checks, &total_checks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("calls: %d ranks, %d checks, %d failed\n", size, total_checks, total_failures);
    fflush(stdout);
  }
  int any = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  MPI_Finalized(&flag);
  if (!flag) return 3;
  return any ? 1 : 0;
}
