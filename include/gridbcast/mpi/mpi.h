/* gridbcast's mpi.h: the MPI subset libgridbcast_mpi provides, for programs
 * that centre on broadcast. Compile with gridbcast-cc / gridbcast-c++ (or
 * pkg-config gridbcast-mpi) and run under
 *
 *     gridbcast launch TOPOLOGY -- ./program args
 *
 * No MPI installation is needed. What is declared here is implemented in full;
 * everything else of MPI is absent (a compile or link error, never a silently
 * wrong answer). See docs/MPI.md for the list and the semantics.
 *
 * Handles are ints (as in MPICH), so the constants are plain integers;
 * MPI_Status has the standard public fields.
 * Every MPI_ function has its PMPI_ twin (MPI_ is a weak alias), so profiling
 * tools can wrap it. */
#ifndef GRIDBCAST_MPI_H
#define GRIDBCAST_MPI_H

/* Laid out by hand: clang-format reads the parameter lists inside
 * GRIDBCAST_MPI_DECLARE(...) as expressions ("MPI_Comm * comm"). */
/* clang-format off */

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRIDBCAST_MPI 1
#define MPI_VERSION 3
#define MPI_SUBVERSION 1

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;
typedef int MPI_Errhandler;
typedef int MPI_Request;
typedef ptrdiff_t MPI_Aint;

typedef struct MPI_Status {
  int MPI_SOURCE;
  int MPI_TAG;
  int MPI_ERROR;
  int gridbcast_reserved;
  long long gridbcast_bytes; /* received length, for MPI_Get_count */
} MPI_Status;

/* Communicators */
#define MPI_COMM_NULL 0
#define MPI_COMM_WORLD 1
#define MPI_COMM_SELF 2

/* Requests (non-blocking point to point) */
#define MPI_REQUEST_NULL 0

/* Basic datatypes */
#define MPI_DATATYPE_NULL 0
#define MPI_CHAR 1
#define MPI_SIGNED_CHAR 2
#define MPI_UNSIGNED_CHAR 3
#define MPI_BYTE 4
#define MPI_SHORT 5
#define MPI_UNSIGNED_SHORT 6
#define MPI_INT 7
#define MPI_UNSIGNED 8
#define MPI_LONG 9
#define MPI_UNSIGNED_LONG 10
#define MPI_LONG_LONG_INT 11
#define MPI_LONG_LONG MPI_LONG_LONG_INT
#define MPI_UNSIGNED_LONG_LONG 12
#define MPI_FLOAT 13
#define MPI_DOUBLE 14
#define MPI_LONG_DOUBLE 15
#define MPI_INT8_T 16
#define MPI_INT16_T 17
#define MPI_INT32_T 18
#define MPI_INT64_T 19
#define MPI_UINT8_T 20
#define MPI_UINT16_T 21
#define MPI_UINT32_T 22
#define MPI_UINT64_T 23
#define MPI_WCHAR 24
#define MPI_C_BOOL 25
#define MPI_AINT 26

/* Reduction operations (over the C integer and floating types) */
#define MPI_OP_NULL 0
#define MPI_MAX 1
#define MPI_MIN 2
#define MPI_SUM 3
#define MPI_PROD 4

/* Error handlers */
#define MPI_ERRHANDLER_NULL 0
#define MPI_ERRORS_ARE_FATAL 1
#define MPI_ERRORS_RETURN 2

/* Error classes (the codes functions return are these classes) */
#define MPI_SUCCESS 0
#define MPI_ERR_BUFFER 1
#define MPI_ERR_COUNT 2
#define MPI_ERR_TYPE 3
#define MPI_ERR_TAG 4
#define MPI_ERR_COMM 5
#define MPI_ERR_RANK 6
#define MPI_ERR_ROOT 7
#define MPI_ERR_GROUP 8
#define MPI_ERR_OP 9
#define MPI_ERR_ARG 12
#define MPI_ERR_UNKNOWN 13
#define MPI_ERR_TRUNCATE 14
#define MPI_ERR_OTHER 15
#define MPI_ERR_INTERN 16
#define MPI_ERR_IN_STATUS 17
#define MPI_ERR_PENDING 18
#define MPI_ERR_REQUEST 19
#define MPI_ERR_LASTCODE 0x3fffffff

/* Special values */
#ifdef __cplusplus
#define MPI_IN_PLACE (reinterpret_cast<void*>(-1))
#define MPI_STATUS_IGNORE (reinterpret_cast<MPI_Status*>(1))
#define MPI_STATUSES_IGNORE (reinterpret_cast<MPI_Status*>(1))
#else
#define MPI_IN_PLACE ((void*)-1)
#define MPI_STATUS_IGNORE ((MPI_Status*)1)
#define MPI_STATUSES_IGNORE ((MPI_Status*)1)
#endif
#define MPI_ANY_SOURCE (-1)
#define MPI_PROC_NULL (-2)
#define MPI_ANY_TAG (-1)
#define MPI_UNDEFINED (-32766)

#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_ERROR_STRING 512
#define MPI_MAX_LIBRARY_VERSION_STRING 256

/* Thread levels (provided: up to MPI_THREAD_SERIALIZED) */
#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3

#define GRIDBCAST_MPI_DECLARE(ret, name, args) \
  ret MPI_##name args;                         \
  ret PMPI_##name args;

/* Environment */
GRIDBCAST_MPI_DECLARE(int, Init, (int* argc, char*** argv))
GRIDBCAST_MPI_DECLARE(int, Init_thread, (int* argc, char*** argv, int required, int* provided))
GRIDBCAST_MPI_DECLARE(int, Initialized, (int* flag))
GRIDBCAST_MPI_DECLARE(int, Finalize, (void))
GRIDBCAST_MPI_DECLARE(int, Finalized, (int* flag))
GRIDBCAST_MPI_DECLARE(int, Abort, (MPI_Comm comm, int errorcode))
GRIDBCAST_MPI_DECLARE(int, Query_thread, (int* provided))
GRIDBCAST_MPI_DECLARE(double, Wtime, (void))
GRIDBCAST_MPI_DECLARE(double, Wtick, (void))
GRIDBCAST_MPI_DECLARE(int, Get_processor_name, (char* name, int* resultlen))
GRIDBCAST_MPI_DECLARE(int, Get_version, (int* version, int* subversion))
GRIDBCAST_MPI_DECLARE(int, Get_library_version, (char* version, int* resultlen))

/* Errors */
GRIDBCAST_MPI_DECLARE(int, Error_string, (int errorcode, char* string, int* resultlen))
GRIDBCAST_MPI_DECLARE(int, Error_class, (int errorcode, int* errorclass))
GRIDBCAST_MPI_DECLARE(int, Comm_set_errhandler, (MPI_Comm comm, MPI_Errhandler errhandler))
GRIDBCAST_MPI_DECLARE(int, Comm_get_errhandler, (MPI_Comm comm, MPI_Errhandler* errhandler))
GRIDBCAST_MPI_DECLARE(int, Errhandler_free, (MPI_Errhandler* errhandler))

/* Communicators */
GRIDBCAST_MPI_DECLARE(int, Comm_rank, (MPI_Comm comm, int* rank))
GRIDBCAST_MPI_DECLARE(int, Comm_size, (MPI_Comm comm, int* size))
GRIDBCAST_MPI_DECLARE(int, Comm_dup, (MPI_Comm comm, MPI_Comm* newcomm))
GRIDBCAST_MPI_DECLARE(int, Comm_split, (MPI_Comm comm, int color, int key, MPI_Comm* newcomm))
GRIDBCAST_MPI_DECLARE(int, Comm_free, (MPI_Comm* comm))

/* Datatypes */
GRIDBCAST_MPI_DECLARE(int, Type_size, (MPI_Datatype datatype, int* size))
GRIDBCAST_MPI_DECLARE(int, Type_contiguous, (int count, MPI_Datatype oldtype, MPI_Datatype* newtype))
GRIDBCAST_MPI_DECLARE(int, Type_commit, (MPI_Datatype* datatype))
GRIDBCAST_MPI_DECLARE(int, Type_free, (MPI_Datatype* datatype))
GRIDBCAST_MPI_DECLARE(int, Get_count, (const MPI_Status* status, MPI_Datatype datatype, int* count))

/* Point to point (blocking) */
GRIDBCAST_MPI_DECLARE(int, Send, (const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                                  MPI_Comm comm))
GRIDBCAST_MPI_DECLARE(int, Recv, (void* buf, int count, MPI_Datatype datatype, int source, int tag,
                                  MPI_Comm comm, MPI_Status* status))

GRIDBCAST_MPI_DECLARE(int, Sendrecv, (const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                      int dest, int sendtag, void* recvbuf, int recvcount,
                                      MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                                      MPI_Status* status))
GRIDBCAST_MPI_DECLARE(int, Probe, (int source, int tag, MPI_Comm comm, MPI_Status* status))
GRIDBCAST_MPI_DECLARE(int, Iprobe, (int source, int tag, MPI_Comm comm, int* flag,
                                    MPI_Status* status))

/* Point to point (non-blocking): progressed inside MPI calls (docs/MPI.md) */
GRIDBCAST_MPI_DECLARE(int, Isend, (const void* buf, int count, MPI_Datatype datatype, int dest,
                                   int tag, MPI_Comm comm, MPI_Request* request))
GRIDBCAST_MPI_DECLARE(int, Irecv, (void* buf, int count, MPI_Datatype datatype, int source,
                                   int tag, MPI_Comm comm, MPI_Request* request))
GRIDBCAST_MPI_DECLARE(int, Wait, (MPI_Request* request, MPI_Status* status))
GRIDBCAST_MPI_DECLARE(int, Waitall, (int count, MPI_Request requests[], MPI_Status* statuses))
GRIDBCAST_MPI_DECLARE(int, Waitany, (int count, MPI_Request requests[], int* index,
                                     MPI_Status* status))
GRIDBCAST_MPI_DECLARE(int, Test, (MPI_Request* request, int* flag, MPI_Status* status))
GRIDBCAST_MPI_DECLARE(int, Testall, (int count, MPI_Request requests[], int* flag,
                                     MPI_Status* statuses))
GRIDBCAST_MPI_DECLARE(int, Testany, (int count, MPI_Request requests[], int* index, int* flag,
                                     MPI_Status* status))
GRIDBCAST_MPI_DECLARE(int, Request_free, (MPI_Request* request))

/* Collectives */
GRIDBCAST_MPI_DECLARE(int, Bcast, (void* buffer, int count, MPI_Datatype datatype, int root,
                                   MPI_Comm comm))
GRIDBCAST_MPI_DECLARE(int, Barrier, (MPI_Comm comm))
/* Non-blocking collectives: progressed inside MPI calls, like MPI_Isend (docs/MPI.md) */
GRIDBCAST_MPI_DECLARE(int, Ibcast, (void* buffer, int count, MPI_Datatype datatype, int root,
                                    MPI_Comm comm, MPI_Request* request))
GRIDBCAST_MPI_DECLARE(int, Ibarrier, (MPI_Comm comm, MPI_Request* request))
GRIDBCAST_MPI_DECLARE(int, Reduce, (const void* sendbuf, void* recvbuf, int count,
                                    MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm))
GRIDBCAST_MPI_DECLARE(int, Allreduce, (const void* sendbuf, void* recvbuf, int count,
                                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm))
GRIDBCAST_MPI_DECLARE(int, Gather, (const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                    void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                    MPI_Comm comm))

#undef GRIDBCAST_MPI_DECLARE

#ifdef __cplusplus
}
#endif

/* clang-format on */

#endif /* GRIDBCAST_MPI_H */
