// Non-blocking point to point (MPI_Isend, MPI_Irecv, MPI_Wait*, MPI_Test*,
// MPI_Request_free) and the calls built on it or next to it (MPI_Sendrecv,
// MPI_Probe, MPI_Iprobe).
//
// A request is a runtime::P2pRequest (runtime/communicator.hpp): an Isend's
// bytes are written by a coroutine on the communicator's event loop, an Irecv
// is posted to the Messenger at once (matched in posting order, with the
// blocking receives). The loop runs inside every MPI call that communicates,
// MPI_Test and MPI_Iprobe included (they poll it without blocking); there is
// no progress thread, so between MPI calls nothing moves. MPI_Wait* block on
// the loop with the p2p deadline (--timeout): nothing moving for that long
// fails the wait with MPI_ERR_OTHER naming the peer awaited.
#include <algorithm>
#include <climits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpi/standalone/state.hpp"

namespace gridbcast::mpi {
namespace {

MPI_Request add_request(Request r) {
  State& st = state();
  while (st.requests.contains(st.next_request) || st.next_request == MPI_REQUEST_NULL)
    st.next_request = st.next_request == INT_MAX ? 1 : st.next_request + 1;
  const MPI_Request handle = st.next_request;
  st.next_request = st.next_request == INT_MAX ? 1 : st.next_request + 1;
  st.requests.emplace(handle, std::move(r));
  return handle;
}

Request& request_at(MPI_Request handle) {
  auto& requests = state().requests;
  auto it = requests.find(handle);
  if (it == requests.end() || it->second.freed)
    throw Error(MPI_ERR_REQUEST, "no active request " + std::to_string(handle));
  return it->second;
}

// The communicator whose error handler a call on these requests uses.
MPI_Comm comm_of(const MPI_Request* requests, int count) {
  if (!requests) return MPI_COMM_WORLD;
  const auto& all = state().requests;
  for (int i = 0; i < count; ++i)
    if (auto it = all.find(requests[i]); it != all.end()) return it->second.comm;
  return MPI_COMM_WORLD;
}

bool complete(const Request& r) {
  return !r.op || state().world->state(r.op).complete;
}

// MPI's empty status: what a null or inactive request reports.
void empty_status(MPI_Status* status) {
  fill_status(status, MPI_ANY_SOURCE, MPI_ANY_TAG, 0);
  if (status && status != MPI_STATUS_IGNORE) status->MPI_ERROR = MPI_SUCCESS;
}

struct Outcome {
  int error_class = MPI_SUCCESS;
  std::string what;
  bool network = false;  // the peer or the network failed
};

// A complete request's result: fills the status, releases the request and
// sets its handle to MPI_REQUEST_NULL.
Outcome finish(MPI_Request* handle, MPI_Status* status) {
  auto& requests = state().requests;
  auto it = requests.find(*handle);
  Request r = std::move(it->second);
  requests.erase(it);
  *handle = MPI_REQUEST_NULL;
  Outcome o;
  if (!r.op) {  // MPI_PROC_NULL
    if (r.is_receive)
      fill_status(status, MPI_PROC_NULL, MPI_ANY_TAG, 0);
    else
      empty_status(status);
    return o;
  }
  const runtime::P2pState s = state().world->state(r.op);
  if (!s.error.empty()) return Outcome{MPI_ERR_OTHER, s.error, true};
  if (!r.is_receive) {
    empty_status(status);
    return o;
  }
  int source = r.peer;
  if (source == MPI_ANY_SOURCE) {
    source = s.received.source;  // world rank: the communicator's rank below
    for (size_t i = 0; i < r.members.size(); ++i)
      if (r.members[i] == s.received.source) source = static_cast<int>(i);
  }
  fill_status(status, source, static_cast<int>(s.received.tag),
              std::min(s.received.bytes, r.capacity));
  if (s.received.bytes > r.capacity)
    o = Outcome{MPI_ERR_TRUNCATE,
                "a message of " + std::to_string(s.received.bytes) + " bytes from rank " +
                    std::to_string(source) + " into a buffer of " + std::to_string(r.capacity),
                false};
  return o;
}

// Forgets freed requests that have completed.
void reap() {
  auto& requests = state().requests;
  for (auto it = requests.begin(); it != requests.end();)
    it = it->second.freed && complete(it->second) ? requests.erase(it) : std::next(it);
}

// Blocks until `needed` of the active requests among `handles` are complete or
// one failed; returns what the communicator reported if it threw (a failure,
// or the deadline naming the peer), else "".
std::string block_on(const MPI_Request* handles, int count, size_t needed) {
  std::vector<runtime::P2pRequest> ops;
  for (int i = 0; i < count; ++i) {
    if (handles[i] == MPI_REQUEST_NULL) continue;
    const Request& r = request_at(handles[i]);
    if (!r.op) {
      if (needed > 0) --needed;  // complete already
      continue;
    }
    ops.push_back(r.op);
  }
  if (ops.empty() || needed == 0) return {};
  try {
    state().world->wait(ops, std::min(needed, ops.size()));
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

void check_requests(int count, const MPI_Request* requests) {
  check_count(count);
  if (count > 0 && !requests) throw Error(MPI_ERR_ARG, "null array of requests");
  for (int i = 0; i < count; ++i)
    if (requests[i] != MPI_REQUEST_NULL) request_at(requests[i]);
}

MPI_Status* status_at(MPI_Status* statuses, int i) {
  return statuses == MPI_STATUSES_IGNORE || statuses == nullptr ? MPI_STATUS_IGNORE : statuses + i;
}

// Completes every request of an array whose requests are all complete (Waitall,
// Testall): statuses with MPI_ERROR set. Returns the first error, if any.
Outcome finish_all(int count, MPI_Request* requests, MPI_Status* statuses) {
  Outcome first;
  for (int i = 0; i < count; ++i) {
    MPI_Status* st = status_at(statuses, i);
    Outcome o;
    if (requests[i] == MPI_REQUEST_NULL) {
      empty_status(st);
    } else if (!complete(request_at(requests[i]))) {
      o = Outcome{MPI_ERR_PENDING, "request " + std::to_string(requests[i]) + " is pending", false};
    } else {
      o = finish(&requests[i], st);
    }
    if (st != MPI_STATUS_IGNORE) st->MPI_ERROR = o.error_class;
    if (o.error_class != MPI_SUCCESS && first.error_class == MPI_SUCCESS &&
        o.error_class != MPI_ERR_PENDING)
      first = o;
  }
  return first;
}

// Raises an Outcome from inside an entry point (through guarded()).
void throw_outcome(const Outcome& o, const std::string& failure) {
  if (o.error_class == MPI_SUCCESS) return;
  if (o.network) throw std::runtime_error(failure.empty() ? o.what : failure);
  throw Error(o.error_class, o.what);
}

}  // namespace

void flush_sends() {
  State& st = state();
  std::vector<runtime::P2pRequest> ops;
  for (const auto& [handle, r] : st.requests)
    if (!r.is_receive && r.op) ops.push_back(r.op);
  if (!ops.empty()) st.world->wait(ops, ops.size());
  reap();
}

void complete_collectives(MPI_Comm comm) {
  State& st = state();
  std::vector<runtime::P2pRequest> ops;
  for (const auto& [handle, r] : st.requests)
    if (r.collective && r.comm == comm && r.op) ops.push_back(r.op);
  if (!ops.empty()) st.world->wait(ops, ops.size());
}

}  // namespace gridbcast::mpi

using namespace gridbcast::mpi;  // NOLINT: the C entry points below

#define GRIDBCAST_EXPORT extern "C" __attribute__((visibility("default")))
#define GRIDBCAST_ALIAS(name) \
  GRIDBCAST_EXPORT decltype(PMPI_##name) MPI_##name __attribute__((weak, alias("PMPI_" #name)));

GRIDBCAST_EXPORT int PMPI_Isend(const void* buf, int count, MPI_Datatype datatype, int dest,
                                int tag, MPI_Comm comm, MPI_Request* request) {
  return guarded(comm, "MPI_Isend", [&] {
    Comm& c = comm_at(comm);
    check_count(count);
    const std::uint64_t bytes = type_at(datatype).size * static_cast<std::uint64_t>(count);
    if (tag < 0) throw Error(MPI_ERR_TAG, "tag " + std::to_string(tag) + " (tags are 0..INT_MAX)");
    if (!request) throw Error(MPI_ERR_ARG, "null request");
    Request r;
    r.comm = comm;
    r.peer = dest;
    if (dest != MPI_PROC_NULL) {
      check_rank(c, dest, MPI_ERR_RANK, "destination");
      check_buffer(buf, bytes);
      r.op = state().world->isend(c.members[static_cast<size_t>(dest)], c.context, tag, buf, bytes);
    }
    *request = add_request(std::move(r));
  });
}
GRIDBCAST_ALIAS(Isend)

GRIDBCAST_EXPORT int PMPI_Irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                                MPI_Comm comm, MPI_Request* request) {
  return guarded(comm, "MPI_Irecv", [&] {
    Comm& c = comm_at(comm);
    check_count(count);
    const std::uint64_t capacity = type_at(datatype).size * static_cast<std::uint64_t>(count);
    if (tag < 0 && tag != MPI_ANY_TAG)
      throw Error(MPI_ERR_TAG, "tag " + std::to_string(tag) + " (0..INT_MAX or MPI_ANY_TAG)");
    if (!request) throw Error(MPI_ERR_ARG, "null request");
    Request r;
    r.is_receive = true;
    r.comm = comm;
    r.peer = source;
    r.capacity = capacity;
    if (source != MPI_PROC_NULL) {
      if (source != MPI_ANY_SOURCE) check_rank(c, source, MPI_ERR_RANK, "source");
      check_buffer(buf, capacity);
      std::optional<int> from;
      if (source != MPI_ANY_SOURCE)
        from = c.members[static_cast<size_t>(source)];
      else if (!c.is_world)
        r.members = c.members;
      std::optional<std::int64_t> want_tag;
      if (tag != MPI_ANY_TAG) want_tag = tag;
      r.op = state().world->irecv(from, c.context, want_tag, buf, capacity);
    }
    *request = add_request(std::move(r));
  });
}
GRIDBCAST_ALIAS(Irecv)

GRIDBCAST_EXPORT int PMPI_Wait(MPI_Request* request, MPI_Status* status) {
  return guarded(comm_of(request, 1), "MPI_Wait", [&] {
    check_initialized();
    if (!request) throw Error(MPI_ERR_ARG, "null request");
    if (*request == MPI_REQUEST_NULL) {
      empty_status(status);
      return;
    }
    request_at(*request);
    const std::string failure = block_on(request, 1, 1);
    if (!complete(request_at(*request))) throw std::runtime_error(failure);
    throw_outcome(finish(request, status), failure);
  });
}
GRIDBCAST_ALIAS(Wait)

GRIDBCAST_EXPORT int PMPI_Waitall(int count, MPI_Request requests[], MPI_Status* statuses) {
  const MPI_Comm comm = comm_of(requests, count);
  Outcome first;
  std::string failure;
  const int rc = guarded(comm, "MPI_Waitall", [&] {
    check_initialized();
    check_requests(count, requests);
    failure = block_on(requests, count, static_cast<size_t>(count));
    first = finish_all(count, requests, statuses);
    reap();
  });
  if (rc != MPI_SUCCESS || first.error_class == MPI_SUCCESS) return rc;
  // MPI_ERR_IN_STATUS: each status's MPI_ERROR tells (MPI_ERR_PENDING: not completed).
  return raise(comm, "MPI_Waitall", MPI_ERR_IN_STATUS,
               first.network && !failure.empty() ? failure : first.what, first.network);
}
GRIDBCAST_ALIAS(Waitall)

namespace {

// Waitany and Testany: the first complete active request, if any.
int any(const char* function, int count, MPI_Request requests[], int* index, int* flag,
        MPI_Status* status, bool block) {
  return guarded(comm_of(requests, count), function, [&] {
    check_initialized();
    check_requests(count, requests);
    if (!index) throw Error(MPI_ERR_ARG, "null index");
    bool active = false;
    for (int i = 0; i < count; ++i) active = active || requests[i] != MPI_REQUEST_NULL;
    if (!active) {
      *index = MPI_UNDEFINED;
      if (flag) *flag = 1;
      empty_status(status);
      return;
    }
    std::string failure;
    if (block)
      failure = block_on(requests, count, 1);
    else
      state().world->poll();
    reap();
    for (int i = 0; i < count; ++i) {
      if (requests[i] == MPI_REQUEST_NULL || !complete(request_at(requests[i]))) continue;
      *index = i;
      if (flag) *flag = 1;
      throw_outcome(finish(&requests[i], status), failure);
      return;
    }
    if (block) throw std::runtime_error(failure);
    *index = MPI_UNDEFINED;
    *flag = 0;
  });
}

}  // namespace

GRIDBCAST_EXPORT int PMPI_Waitany(int count, MPI_Request requests[], int* index,
                                  MPI_Status* status) {
  return any("MPI_Waitany", count, requests, index, nullptr, status, true);
}
GRIDBCAST_ALIAS(Waitany)

GRIDBCAST_EXPORT int PMPI_Testany(int count, MPI_Request requests[], int* index, int* flag,
                                  MPI_Status* status) {
  if (!flag) return raise(comm_of(requests, count), "MPI_Testany", MPI_ERR_ARG, "null flag");
  return any("MPI_Testany", count, requests, index, flag, status, false);
}
GRIDBCAST_ALIAS(Testany)

GRIDBCAST_EXPORT int PMPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  return guarded(comm_of(request, 1), "MPI_Test", [&] {
    check_initialized();
    if (!request || !flag) throw Error(MPI_ERR_ARG, "null request or flag");
    if (*request == MPI_REQUEST_NULL) {
      *flag = 1;
      empty_status(status);
      return;
    }
    request_at(*request);
    state().world->poll();
    reap();
    *flag = complete(request_at(*request)) ? 1 : 0;
    if (*flag) throw_outcome(finish(request, status), {});
  });
}
GRIDBCAST_ALIAS(Test)

GRIDBCAST_EXPORT int PMPI_Testall(int count, MPI_Request requests[], int* flag,
                                  MPI_Status* statuses) {
  const MPI_Comm comm = comm_of(requests, count);
  Outcome first;
  const int rc = guarded(comm, "MPI_Testall", [&] {
    check_initialized();
    check_requests(count, requests);
    if (!flag) throw Error(MPI_ERR_ARG, "null flag");
    state().world->poll();
    reap();
    *flag = 1;
    for (int i = 0; i < count; ++i)
      if (requests[i] != MPI_REQUEST_NULL && !complete(request_at(requests[i]))) *flag = 0;
    if (*flag) first = finish_all(count, requests, statuses);
  });
  if (rc != MPI_SUCCESS || first.error_class == MPI_SUCCESS) return rc;
  return raise(comm, "MPI_Testall", MPI_ERR_IN_STATUS, first.what, first.network);
}
GRIDBCAST_ALIAS(Testall)

GRIDBCAST_EXPORT int PMPI_Request_free(MPI_Request* request) {
  return guarded(comm_of(request, 1), "MPI_Request_free", [&] {
    check_initialized();
    if (!request) throw Error(MPI_ERR_ARG, "null request");
    Request& r = request_at(*request);
    if (r.collective)
      throw Error(MPI_ERR_REQUEST, "request " + std::to_string(*request) +
                                       " is a non-blocking collective, which MPI does not let "
                                       "a program free: complete it with MPI_Wait or MPI_Test");
    // An active request still completes (a send's bytes still leave); it is
    // forgotten then.
    if (complete(r))
      state().requests.erase(*request);
    else
      r.freed = true;
    *request = MPI_REQUEST_NULL;
  });
}
GRIDBCAST_ALIAS(Request_free)

GRIDBCAST_EXPORT int PMPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                   int dest, int sendtag, void* recvbuf, int recvcount,
                                   MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                                   MPI_Status* status) {
  return guarded(comm, "MPI_Sendrecv", [&] {
    comm_at(comm);
    // The receive is posted first, then the send starts; both complete on the
    // event loop, so two ranks exchanging large messages cannot deadlock.
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    State& st = state();
    const MPI_Errhandler handler = st.comms.at(comm).errhandler;
    // The parts report to this call: errors come back as classes here.
    st.comms.at(comm).errhandler = MPI_ERRORS_RETURN;
    int rc = PMPI_Irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &reqs[0]);
    if (rc == MPI_SUCCESS)
      rc = PMPI_Isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &reqs[1]);
    std::string detail = rc == MPI_SUCCESS ? "" : st.last_detail[rc];
    std::string failure;
    Outcome recv_outcome, send_outcome;
    if (rc == MPI_SUCCESS) {
      failure = block_on(reqs, 2, 2);
      if (!complete(request_at(reqs[0])) || !complete(request_at(reqs[1])))
        recv_outcome = Outcome{MPI_ERR_OTHER, failure, true};
    }
    st.comms.at(comm).errhandler = handler;
    if (rc != MPI_SUCCESS) {
      if (reqs[0] != MPI_REQUEST_NULL) {
        st.world->cancel_receive(request_at(reqs[0]).op);
        st.requests.erase(reqs[0]);
      }
      throw Error(rc, detail);
    }
    throw_outcome(recv_outcome, failure);
    recv_outcome = finish(&reqs[0], status);
    send_outcome = finish(&reqs[1], MPI_STATUS_IGNORE);
    throw_outcome(send_outcome, failure);
    throw_outcome(recv_outcome, failure);
  });
}
GRIDBCAST_ALIAS(Sendrecv)

namespace {

int probe(const char* function, int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status,
          bool block) {
  return guarded(comm, function, [&] {
    Comm& c = comm_at(comm);
    if (!block && !flag) throw Error(MPI_ERR_ARG, "null flag");
    if (tag < 0 && tag != MPI_ANY_TAG)
      throw Error(MPI_ERR_TAG, "tag " + std::to_string(tag) + " (0..INT_MAX or MPI_ANY_TAG)");
    if (source == MPI_PROC_NULL) {
      if (flag) *flag = 1;
      fill_status(status, MPI_PROC_NULL, MPI_ANY_TAG, 0);
      return;
    }
    if (source != MPI_ANY_SOURCE) check_rank(c, source, MPI_ERR_RANK, "source");
    std::optional<int> from;
    if (source != MPI_ANY_SOURCE) from = c.members[static_cast<size_t>(source)];
    std::optional<std::int64_t> want_tag;
    if (tag != MPI_ANY_TAG) want_tag = tag;
    const auto m = state().world->probe(from, c.context, want_tag, block);
    if (flag) *flag = m ? 1 : 0;
    if (m) fill_status(status, c.rank_of.at(m->source), static_cast<int>(m->tag), m->bytes);
  });
}

}  // namespace

GRIDBCAST_EXPORT int PMPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  return probe("MPI_Probe", source, tag, comm, nullptr, status, true);
}
GRIDBCAST_ALIAS(Probe)

GRIDBCAST_EXPORT int PMPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag,
                                 MPI_Status* status) {
  return probe("MPI_Iprobe", source, tag, comm, flag, status, false);
}
GRIDBCAST_ALIAS(Iprobe)

GRIDBCAST_EXPORT int PMPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                 MPI_Comm comm, MPI_Request* request) {
  return guarded(comm, "MPI_Ibcast", [&] {
    Comm& c = comm_at(comm);
    check_count(count);
    const std::uint64_t bytes = type_at(datatype).size * static_cast<std::uint64_t>(count);
    check_rank(c, root, MPI_ERR_ROOT, "root");
    check_buffer(buffer, bytes);
    if (!request) throw Error(MPI_ERR_ARG, "null request");
    Request r;
    r.collective = true;
    r.comm = comm;
    r.peer = root;
    r.op = ibcast_bytes(c, buffer, bytes, root);
    *request = add_request(std::move(r));
  });
}
GRIDBCAST_ALIAS(Ibcast)

GRIDBCAST_EXPORT int PMPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  return guarded(comm, "MPI_Ibarrier", [&] {
    Comm& c = comm_at(comm);
    if (!request) throw Error(MPI_ERR_ARG, "null request");
    Request r;
    r.collective = true;
    r.comm = comm;
    r.op = ibarrier(c);
    *request = add_request(std::move(r));
  });
}
GRIDBCAST_ALIAS(Ibarrier)
