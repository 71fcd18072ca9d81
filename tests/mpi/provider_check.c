/* MPI_Bcast as applications use it, for comparing runs with and without
 * gridbcast's provider (LD_PRELOAD=libgridbcast_mpi_provider_*.so): every
 * root, sizes around the thresholds, basic, contiguous, non-contiguous and
 * mixed datatypes (typemaps that differ between ranks, signatures that match),
 * communicators from MPI_Comm_dup and MPI_Comm_split, several in use at once.
 * Rank 0 prints one line per case with a digest of every rank's buffer, so the
 * output is identical whenever every broadcast is right; each rank also checks
 * its buffer against the pattern. Exit status 0 when nothing differed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int world_rank, mismatches, cases;

static unsigned char pattern(long long i, int seed) { return (unsigned char)((i * 167 + seed * 13 + (i >> 11)) & 0xff); }

static uint64_t digest(const unsigned char* p, long long n) {
  uint64_t h = 1469598103934665603ull;
  for (long long i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* Gathers every rank's digest and whether its bytes were right; rank 0 prints. */
static void report(MPI_Comm comm, const char* name, const unsigned char* buf, long long bytes, int bad) {
  int r, n;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  uint64_t mine = digest(buf, bytes), first = 0;
  uint64_t* all = malloc(sizeof(uint64_t) * (size_t)n);
  MPI_Gather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, comm);
  int any_bad = 0;
  MPI_Reduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, 0, comm);
  if (r == 0) {
    first = all[0];
    int same = 1;
    for (int q = 1; q < n; ++q) same &= all[q] == first;
    if (!same || any_bad) ++mismatches;
    /* Only the communicator's rank 0 that is also world rank 0 prints, in order. */
    if (world_rank == 0)
      printf("%-44s %8lld bytes  %016llx  %s\n", name, bytes, (unsigned long long)first,
             same && !any_bad ? "ok" : "MISMATCH");
  }
  ++cases;
  free(all);
}

static void byte_cases(MPI_Comm comm, const char* what, int seed) {
  int r, n;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  const long long sizes[] = {0, 1, 999, 65535, 65536, 200001, (4 << 20) + 7};
  unsigned char* buf = malloc((4 << 20) + 7);
  for (int root = 0; root < n; ++root) {
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
      const long long bytes = sizes[k];
      for (long long i = 0; i < bytes; ++i) buf[i] = r == root ? pattern(i, seed + root) : 0x5a;
      MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, comm);
      int bad = 0;
      for (long long i = 0; i < bytes; ++i) bad |= buf[i] != pattern(i, seed + root);
      char name[64];
      snprintf(name, sizeof name, "%s bytes root %d", what, root);
      report(comm, name, buf, bytes, bad);
    }
  }
  free(buf);
}

static void type_cases(MPI_Comm comm, const char* what) {
  int r, n;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  const int count = 300000; /* 1.2 MB of ints */
  int* ints = malloc(sizeof(int) * 2 * (size_t)count);
  char name[64];
  const int root = n - 1;
  /* Basic types. */
  for (int i = 0; i < count; ++i) ints[i] = r == root ? i * 7 - 3 : -1;
  MPI_Bcast(ints, count, MPI_INT, root, comm);
  int bad = 0;
  for (int i = 0; i < count; ++i) bad |= ints[i] != i * 7 - 3;
  snprintf(name, sizeof name, "%s MPI_INT", what);
  report(comm, name, (unsigned char*)ints, (long long)count * 4, bad);
  /* A contiguous type of 1000 ints. */
  MPI_Datatype block;
  MPI_Type_contiguous(1000, MPI_INT, &block);
  MPI_Type_commit(&block);
  for (int i = 0; i < count; ++i) ints[i] = r == root ? i ^ 0x55 : -1;
  MPI_Bcast(ints, count / 1000, block, root, comm);
  bad = 0;
  for (int i = 0; i < count; ++i) bad |= ints[i] != (i ^ 0x55);
  snprintf(name, sizeof name, "%s contiguous(1000, MPI_INT)", what);
  report(comm, name, (unsigned char*)ints, (long long)count * 4, bad);
  /* Non-contiguous: every other int; the holes must stay untouched. */
  MPI_Datatype strided;
  MPI_Type_vector(count, 1, 2, MPI_INT, &strided);
  MPI_Type_commit(&strided);
  for (int i = 0; i < 2 * count; ++i) ints[i] = r == root ? (i % 2 ? -7 : i * 3) : (i % 2 ? -7 : -1);
  MPI_Bcast(ints, 1, strided, root, comm);
  bad = 0;
  for (int i = 0; i < 2 * count; ++i) bad |= ints[i] != (i % 2 ? -7 : i * 3);
  snprintf(name, sizeof name, "%s vector(stride 2)", what);
  report(comm, name, (unsigned char*)ints, (long long)count * 8, bad);
  /* Mixed: the root sends the strided type, the others receive plain ints. */
  for (int i = 0; i < 2 * count; ++i) ints[i] = r == root ? (i % 2 ? -9 : i + 1) : -1;
  if (r == root) {
    MPI_Bcast(ints, 1, strided, root, comm);
  } else {
    MPI_Bcast(ints, count, MPI_INT, root, comm);
  }
  bad = 0;
  for (int i = 0; i < count && r != root; ++i) bad |= ints[i] != 2 * i + 1;
  /* Compare the gathered-out values only: on the root they sit strided. */
  if (r == root)
    for (int i = 0; i < count; ++i) ints[i] = ints[2 * i];
  snprintf(name, sizeof name, "%s mixed vector/MPI_INT", what);
  report(comm, name, (unsigned char*)ints, (long long)count * 4, bad);
  MPI_Type_free(&strided);
  MPI_Type_free(&block);
  free(ints);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm dup, parity, reversed, sub;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &parity);
  MPI_Comm_split(MPI_COMM_WORLD, 0, size - world_rank, &reversed);
  MPI_Comm_split(reversed, world_rank == 0 ? MPI_UNDEFINED : 1, world_rank, &sub);

  byte_cases(MPI_COMM_WORLD, "world", 1);
  type_cases(MPI_COMM_WORLD, "world");
  byte_cases(dup, "dup", 2);
  byte_cases(reversed, "reversed", 3);
  type_cases(reversed, "reversed");
  /* Only world rank 0 prints, so the parity communicator of odd ranks is
   * checked through the exit status alone. */
  byte_cases(parity, world_rank % 2 ? "odd" : "even", 4);
  if (sub != MPI_COMM_NULL) {
    byte_cases(sub, "without rank 0", 5); /* rank 0 prints nothing here */
    MPI_Comm_free(&sub);
  }
  /* Several communicators in use at once, interleaved. */
  unsigned char a[100000], b[100000];
  for (int k = 0; k < 20; ++k) {
    int pr;
    MPI_Comm_rank(parity, &pr);
    for (int i = 0; i < 100000; ++i) {
      a[i] = world_rank == k % size ? pattern(i, k) : 0;
      b[i] = pr == 0 ? pattern(i, k + 50) : 0;
    }
    MPI_Bcast(a, 100000, MPI_BYTE, k % size, dup);
    MPI_Bcast(b, 100000, MPI_BYTE, 0, parity);
    int bad = 0;
    for (int i = 0; i < 100000; ++i) bad |= a[i] != pattern(i, k) || b[i] != pattern(i, k + 50);
    if (bad) ++mismatches;
  }
  MPI_Comm_free(&parity);
  MPI_Comm_free(&reversed);
  MPI_Comm_free(&dup);
  int total = 0;
  MPI_Allreduce(&mismatches, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) printf("provider_check: %d ranks, %d cases on rank 0, %d mismatches\n", size, cases, total);
  fflush(stdout);
  MPI_Finalize();
  return total ? 1 : 0;
}
