/* A long-running MPI program for the liveness tests: writes its pid to
 * DIR/pid.RANK, then runs barriers until SECONDS have passed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: loop DIR SECONDS\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char path[4096];
  snprintf(path, sizeof path, "%s/pid.%d", argv[1], rank);
  FILE* f = fopen(path, "w");
  if (!f) MPI_Abort(MPI_COMM_WORLD, 3);
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  const time_t end = time(NULL) + atoi(argv[2]);
  while (time(NULL) < end) {
    MPI_Barrier(MPI_COMM_WORLD);
    usleep(20000);
  }
  MPI_Finalize();
  return 0;
}
