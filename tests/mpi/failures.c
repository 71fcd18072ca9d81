/* How a program ends badly, for the launcher to report: usage failures MODE
 *   abort        rank 2 calls MPI_Abort(MPI_COMM_WORLD, 7) while the others wait
 *   exit         rank 1 exits with status 3 after MPI_Init
 *   nofinalize   rank 1 returns 0 from main without MPI_Finalize
 *   fatal        rank 0 sends to a rank that does not exist (MPI_ERRORS_ARE_FATAL)
 *   stdin        rank 0 echoes its standard input (stdin stays the program's) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* mode = argc > 1 ? argv[1] : "";
  MPI_Barrier(MPI_COMM_WORLD);
  if (strcmp(mode, "abort") == 0) {
    if (rank == 2) MPI_Abort(MPI_COMM_WORLD, 7);
    int x;
    MPI_Recv(&x, 1, MPI_INT, 2, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else if (strcmp(mode, "exit") == 0) {
    if (rank == 1) exit(3);
  } else if (strcmp(mode, "nofinalize") == 0) {
    if (rank == 1) return 0;
  } else if (strcmp(mode, "fatal") == 0) {
    if (rank == 0) {
      int x = 0;
      MPI_Send(&x, 1, MPI_INT, size + 5, 0, MPI_COMM_WORLD);
    }
  } else if (strcmp(mode, "stdin") == 0) {
    if (rank == 0) {
      char line[256];
      if (fgets(line, sizeof line, stdin)) printf("rank 0 read: %s", line);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
