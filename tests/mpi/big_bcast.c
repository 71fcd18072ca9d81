/* Broadcasts beyond 2 GiB: MPI_DOUBLE with count * 8 > 2^31, then the same
 * bytes as a count of a 1 MiB contiguous datatype from the other end. Meant
 * for 2 ranks (site-configs/loopback-pair.yaml); prints one line on rank 0,
 * exit status 0 when every rank holds every byte. Usage: big_bcast [MIB] */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t word(uint64_t i, uint64_t seed) { return (i + seed) * 0x9E3779B97F4A7C15ull ^ (i >> 7); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long long mib = argc > 1 ? atoll(argv[1]) : 2304; /* 2.25 GiB */
  const uint64_t bytes = (uint64_t)mib << 20, words = bytes / 8;
  uint64_t* buf = malloc(bytes);
  if (!buf) {
    fprintf(stderr, "rank %d: cannot allocate %llu bytes\n", rank, (unsigned long long)bytes);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int bad = 0;
  /* 1: doubles from rank 0. */
  for (uint64_t i = 0; i < words; ++i) buf[i] = rank == 0 ? word(i, 1) : 0;
  double t0 = MPI_Wtime();
  MPI_Bcast(buf, (int)words, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  double t1 = MPI_Wtime();
  for (uint64_t i = 0; i < words; ++i) bad |= buf[i] != word(i, 1);
  /* 2: a contiguous type of 1 MiB, from the last rank. */
  MPI_Datatype mebibyte;
  MPI_Type_contiguous(1 << 20, MPI_BYTE, &mebibyte);
  MPI_Type_commit(&mebibyte);
  for (uint64_t i = 0; i < words; ++i) buf[i] = rank == size - 1 ? word(i, 2) : 0;
  MPI_Bcast(buf, (int)mib, mebibyte, size - 1, MPI_COMM_WORLD);
  for (uint64_t i = 0; i < words; ++i) bad |= (buf[i] != word(i, 2)) << 1;
  MPI_Type_free(&mebibyte);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("big_bcast: %d ranks, %llu bytes twice, %s (first %.2f s)\n", size,
                        (unsigned long long)bytes, any ? "MISMATCH" : "verified", t1 - t0);
  free(buf);
  MPI_Finalize();
  return any ? 1 : 0;
}
