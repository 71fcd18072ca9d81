// libgridbcast_mpi's process state: the job (job::Session), the world
// Communicator, MPI communicators and datatypes, and error handling. Internal
// to mpi/standalone.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gridbcast/mpi/mpi.h"
#include "job/session.hpp"
#include "runtime/communicator.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::mpi {

// An MPI error on its way out of an entry point: the error class and what
// exactly went wrong (shown when the error is fatal, and by MPI_Error_string).
class Error : public std::runtime_error {
 public:
  Error(int error_class, const std::string& what) : std::runtime_error(what), class_(error_class) {}
  int error_class() const { return class_; }

 private:
  int class_;
};

// A datatype: `count` elements of the basic type `base`, `size` bytes in all.
struct TypeInfo {
  std::uint64_t size = 0;
  MPI_Datatype base = MPI_DATATYPE_NULL;
  std::uint64_t count = 0;
  bool committed = true;
  bool predefined = true;
};

struct Comm {
  std::vector<int> members;    // world ranks, index = rank in this communicator
  std::map<int, int> rank_of;  // world rank -> rank in this communicator
  int rank = 0;                // this process
  std::uint64_t context = 0;   // point-to-point; context + 1 for collectives
  MPI_Errhandler errhandler = MPI_ERRORS_ARE_FATAL;
  std::uint64_t children = 0;   // communicators made from this one (context ids)
  std::uint64_t bcasts = 0;     // broadcasts so far (GRIDBCAST_ALGORITHM=random)
  std::uint64_t ibarriers = 0;  // non-blocking barriers so far: each has its own tags
  bool is_world = false;
  bool group = false;  // defined as a runtime group (size > 1, not world)
  int size() const { return static_cast<int>(members.size()); }
  std::uint64_t collective_context() const { return context + 1; }
};

// A non-blocking send or receive (requests.cpp). A receive keeps what it needs
// to report its status after its communicator is freed.
struct Request {
  bool is_receive = false;
  bool collective = false;  // MPI_Ibcast, MPI_Ibarrier
  runtime::P2pRequest op;   // null: complete at once (MPI_PROC_NULL)
  MPI_Comm comm = MPI_COMM_NULL;
  int peer = MPI_PROC_NULL;    // destination or source, a rank of the communicator
  std::vector<int> members;    // a receive from MPI_ANY_SOURCE: the ranks, to map the sender
  std::uint64_t capacity = 0;  // a receive's buffer, bytes
  bool freed = false;          // MPI_Request_free before completion: forgotten when complete
};

struct State {
  bool initialized = false;
  bool finalized = false;
  int thread_level = MPI_THREAD_SINGLE;
  std::unique_ptr<job::Session> session;             // under `gridbcast launch`
  std::unique_ptr<runtime::Communicator> singleton;  // started without a launcher
  runtime::Communicator* world = nullptr;
  std::string processor_name;
  std::map<MPI_Comm, Comm> comms;
  MPI_Comm next_comm = 3;
  std::map<MPI_Datatype, TypeInfo> derived;
  MPI_Datatype next_type = 1000;
  // MPI_Bcast's algorithm: GRIDBCAST_ALGORITHM, else the launcher's --algorithm.
  std::optional<topology::Algorithm> algorithm;
  bool random_algorithm = false;
  std::map<int, std::string> last_detail;   // error class -> what happened last
  std::map<MPI_Request, Request> requests;  // active requests (freed ones until complete)
  MPI_Request next_request = 1;
};

State& state();

// Lookups that throw Error with the right class.
Comm& comm_at(MPI_Comm comm);
const TypeInfo& type_at(MPI_Datatype type, bool need_committed = true);
void check_initialized();

// Sends a fatal failure to the launcher (if any) and ends this process.
[[noreturn]] void abort_process(int code, const std::string& why);

// Raises an error the way the communicator's handler says; returns the class.
// A fatal error that came from the network (a peer that exited or failed) is
// most likely a consequence: the launcher is given a moment to report and end
// the rank that failed first before this one reports its own view.
int raise(MPI_Comm comm, const char* function, int error_class, const std::string& what,
          bool from_network = false);

// Runs an entry point's body; exceptions become MPI errors on `comm`.
template <typename F>
int guarded(MPI_Comm comm, const char* function, F&& body) {
  try {
    body();
    return MPI_SUCCESS;
  } catch (const Error& e) {
    return raise(comm, function, e.error_class(), e.what());
  } catch (const std::exception& e) {
    return raise(comm, function, MPI_ERR_OTHER, e.what(), true);
  }
}

// Argument checks that throw Error with the right class.
void check_count(int count);
void check_buffer(const void* buf, std::uint64_t bytes);
void check_rank(const Comm& c, int rank, int error_class, const char* what);
// MPI_SOURCE, MPI_TAG and the length (MPI_STATUS_IGNORE: nothing).
void fill_status(MPI_Status* status, int source, int tag, std::uint64_t bytes);

// Completes the active send requests, freed ones included, and the
// non-blocking collectives (MPI_Finalize).
void flush_sends();
// Completes the non-blocking collectives started on `comm` (MPI_Comm_free: its
// group must not go while one of its broadcasts runs).
void complete_collectives(MPI_Comm comm);

// Collectives over runtime point-to-point and broadcasts (collectives.cpp).
void bcast_bytes(Comm& c, void* buffer, std::uint64_t bytes, int root);
void barrier(Comm& c);
// Their non-blocking forms: null when there is nothing to do (one rank).
runtime::P2pRequest ibcast_bytes(Comm& c, void* buffer, std::uint64_t bytes, int root);
runtime::P2pRequest ibarrier(Comm& c);
void reduce(Comm& c, const void* sendbuf, void* recvbuf, std::uint64_t elements, MPI_Datatype base,
            std::uint64_t bytes, MPI_Op op, int root);
void allgather_bytes(Comm& c, const void* mine, std::uint64_t bytes, void* all);

// Reduction kernels (ops.cpp): inout[i] = inout[i] op in[i] for `n` elements of
// the basic type; throws Error(MPI_ERR_OP) for an op the type does not support.
void apply_op(MPI_Op op, MPI_Datatype base, void* inout, const void* in, std::uint64_t n);
void check_op(MPI_Op op, MPI_Datatype base);

}  // namespace gridbcast::mpi
