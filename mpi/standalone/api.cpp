// The C ABI of libgridbcast_mpi: every function of gridbcast/mpi/mpi.h, as
// PMPI_x with MPI_x a weak alias. Each entry point checks its arguments, runs
// on the State (state.hpp), and turns failures into MPI error classes through
// the communicator's error handler: MPI_ERRORS_ARE_FATAL (the default) prints
// what happened and ends the job naming this rank; MPI_ERRORS_RETURN returns
// the class, and MPI_Error_string tells what happened.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "mpi/standalone/state.hpp"

namespace gridbcast::mpi {
namespace {

constexpr std::uint64_t kWorldContext = 2;
constexpr std::uint64_t kSelfContext = 4;
constexpr const char* kLibraryVersion = "gridbcast 0.1.0 (libgridbcast_mpi, MPI 3.1 subset)";

struct BasicType {
  MPI_Datatype handle;
  std::uint64_t size;
  const char* name;
};

constexpr BasicType kBasicTypes[] = {
    {MPI_CHAR, sizeof(char), "MPI_CHAR"},
    {MPI_SIGNED_CHAR, sizeof(signed char), "MPI_SIGNED_CHAR"},
    {MPI_UNSIGNED_CHAR, sizeof(unsigned char), "MPI_UNSIGNED_CHAR"},
    {MPI_BYTE, 1, "MPI_BYTE"},
    {MPI_SHORT, sizeof(short), "MPI_SHORT"},
    {MPI_UNSIGNED_SHORT, sizeof(unsigned short), "MPI_UNSIGNED_SHORT"},
    {MPI_INT, sizeof(int), "MPI_INT"},
    {MPI_UNSIGNED, sizeof(unsigned), "MPI_UNSIGNED"},
    {MPI_LONG, sizeof(long), "MPI_LONG"},
    {MPI_UNSIGNED_LONG, sizeof(unsigned long), "MPI_UNSIGNED_LONG"},
    {MPI_LONG_LONG_INT, sizeof(long long), "MPI_LONG_LONG_INT"},
    {MPI_UNSIGNED_LONG_LONG, sizeof(unsigned long long), "MPI_UNSIGNED_LONG_LONG"},
    {MPI_FLOAT, sizeof(float), "MPI_FLOAT"},
    {MPI_DOUBLE, sizeof(double), "MPI_DOUBLE"},
    {MPI_LONG_DOUBLE, sizeof(long double), "MPI_LONG_DOUBLE"},
    {MPI_INT8_T, 1, "MPI_INT8_T"},
    {MPI_INT16_T, 2, "MPI_INT16_T"},
    {MPI_INT32_T, 4, "MPI_INT32_T"},
    {MPI_INT64_T, 8, "MPI_INT64_T"},
    {MPI_UINT8_T, 1, "MPI_UINT8_T"},
    {MPI_UINT16_T, 2, "MPI_UINT16_T"},
    {MPI_UINT32_T, 4, "MPI_UINT32_T"},
    {MPI_UINT64_T, 8, "MPI_UINT64_T"},
    {MPI_WCHAR, sizeof(wchar_t), "MPI_WCHAR"},
    {MPI_C_BOOL, sizeof(bool), "MPI_C_BOOL"},
    {MPI_AINT, sizeof(MPI_Aint), "MPI_AINT"},
};

const char* class_name(int error_class) {
  switch (error_class) {
    case MPI_SUCCESS:
      return "MPI_SUCCESS: no error";
    case MPI_ERR_BUFFER:
      return "MPI_ERR_BUFFER: invalid buffer pointer";
    case MPI_ERR_COUNT:
      return "MPI_ERR_COUNT: invalid count argument";
    case MPI_ERR_TYPE:
      return "MPI_ERR_TYPE: invalid datatype";
    case MPI_ERR_TAG:
      return "MPI_ERR_TAG: invalid tag";
    case MPI_ERR_COMM:
      return "MPI_ERR_COMM: invalid communicator";
    case MPI_ERR_RANK:
      return "MPI_ERR_RANK: invalid rank";
    case MPI_ERR_ROOT:
      return "MPI_ERR_ROOT: invalid root";
    case MPI_ERR_GROUP:
      return "MPI_ERR_GROUP: invalid group";
    case MPI_ERR_OP:
      return "MPI_ERR_OP: invalid reduce operation";
    case MPI_ERR_ARG:
      return "MPI_ERR_ARG: invalid argument";
    case MPI_ERR_UNKNOWN:
      return "MPI_ERR_UNKNOWN: unknown error";
    case MPI_ERR_TRUNCATE:
      return "MPI_ERR_TRUNCATE: message truncated";
    case MPI_ERR_OTHER:
      return "MPI_ERR_OTHER: other error";
    case MPI_ERR_INTERN:
      return "MPI_ERR_INTERN: internal error";
    case MPI_ERR_IN_STATUS:
      return "MPI_ERR_IN_STATUS: error code in status";
    case MPI_ERR_PENDING:
      return "MPI_ERR_PENDING: pending request";
    case MPI_ERR_REQUEST:
      return "MPI_ERR_REQUEST: invalid request";
    default:
      return nullptr;
  }
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A context id for the n-th communicator made from `parent` with this color:
// the same on every member without any communication, distinct from others
// with overwhelming probability; even (context + 1 is the collective context)
// and never one of the fixed ones.
std::uint64_t derive_context(std::uint64_t parent, std::uint64_t n, std::int64_t color) {
  std::uint64_t c = mix(mix(parent) ^ mix(n * 2 + 1) ^ mix(static_cast<std::uint64_t>(color) + 7));
  c &= ~std::uint64_t{1};
  return c <= kSelfContext + 1 ? c + 16 : c;
}

MPI_Comm add_comm(Comm c) {
  State& st = state();
  const MPI_Comm handle = st.next_comm++;
  for (size_t i = 0; i < c.members.size(); ++i) c.rank_of[c.members[i]] = static_cast<int>(i);
  c.rank = c.rank_of.at(st.world->rank());
  if (c.size() > 1 && !c.is_world) {
    st.world->define_group(c.context, c.members);
    c.group = true;
  }
  st.comms.emplace(handle, std::move(c));
  return handle;
}

// As Open MPI and MPICH: predefined operations take predefined datatypes only.
void check_reduction(MPI_Op op, const TypeInfo& t) {
  check_op(op, t.base);
  if (!t.predefined)
    throw Error(MPI_ERR_OP, "predefined operations are defined on predefined datatypes only");
}

std::string hostname() {
  struct utsname u {};
  return ::uname(&u) == 0 ? u.nodename : "localhost";
}

// Starts as a job of one rank (no launcher): the program runs as MPI does when
// started without mpiexec.
std::unique_ptr<runtime::Communicator> singleton_world() {
  topology::Grid g;
  g.name = "singleton";
  g.source = "<singleton>";
  topology::Site site;
  site.name = "local";
  site.ranks = {0};
  g.sites.push_back(site);
  topology::Node node;
  node.name = node.host = hostname();
  node.nics.push_back(topology::Nic{"127.0.0.1", 10e9, ""});
  g.nodes.push_back(node);
  return std::make_unique<runtime::Communicator>(g, 0, runtime::new_credentials());
}

void choose_algorithm(State& st, const std::string& from_launcher) {
  std::string name = from_launcher;
  const char* env = std::getenv("GRIDBCAST_ALGORITHM");
  if (env && *env) name = env;
  if (name.empty() || name == "auto") return;
  if (name == "random") {
    st.random_algorithm = true;
    return;
  }
  st.algorithm = topology::parse_algorithm(name);
  if (!st.algorithm) {
    std::string all;
    for (const auto& a : topology::algorithms()) all += " " + std::string(a.name);
    throw Error(MPI_ERR_ARG,
                "GRIDBCAST_ALGORITHM=\"" + name + "\" is not auto, random or one of:" + all);
  }
}

int initialize(int required, int* provided) {
  State& st = state();
  if (st.initialized || st.finalized)
    return raise(MPI_COMM_NULL, "MPI_Init", MPI_ERR_OTHER,
                 st.finalized ? "MPI_Init after MPI_Finalize" : "MPI_Init called twice");
  const char* launcher = std::getenv("GRIDBCAST_LAUNCHER");
  try {
    if (launcher && *launcher) {
      st.session = std::make_unique<job::Session>();
      st.session->join(&std::cin);
      if (!st.session->params().program())
        throw std::runtime_error(
            "this launcher runs the built-in broadcast job; start MPI programs with "
            "'gridbcast launch TOPOLOGY -- PROGRAM'");
      st.world = &st.session->communicator();
      st.processor_name = st.session->grid().nodes[static_cast<size_t>(st.session->rank())].name;
      choose_algorithm(st, st.session->params().algorithm);
    } else {
      st.singleton = singleton_world();
      st.world = st.singleton.get();
      st.processor_name = hostname();
      choose_algorithm(st, "auto");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gridbcast MPI: MPI_Init failed: %s\n", e.what());
    if (st.session) st.session->report_error(std::string("MPI_Init failed: ") + e.what());
    std::exit(1);
  }
  Comm world;
  world.is_world = true;
  world.context = kWorldContext;
  for (int r = 0; r < st.world->size(); ++r) world.members.push_back(r);
  for (int r = 0; r < st.world->size(); ++r) world.rank_of[r] = r;
  world.rank = st.world->rank();
  st.comms.emplace(MPI_COMM_WORLD, std::move(world));
  Comm self;
  self.context = kSelfContext;
  self.members = {st.world->rank()};
  self.rank_of[st.world->rank()] = 0;
  self.errhandler = MPI_ERRORS_ARE_FATAL;
  st.comms.emplace(MPI_COMM_SELF, std::move(self));
  st.thread_level = required < MPI_THREAD_SERIALIZED ? std::max(required, MPI_THREAD_SINGLE)
                                                     : MPI_THREAD_SERIALIZED;
  if (provided) *provided = st.thread_level;
  st.initialized = true;
  return MPI_SUCCESS;
}

}  // namespace

// Raises an error the way the communicator's handler says; returns the class.
// A fatal error that came from the network (a peer that exited or failed) is
// most likely a consequence: the launcher is given a moment to report and end
// the rank that failed first before this one reports its own view.
int raise(MPI_Comm comm, const char* function, int error_class, const std::string& what,
          bool from_network) {
  State& st = state();
  st.last_detail[error_class] = std::string(function) + ": " + what;
  MPI_Errhandler handler = MPI_ERRORS_ARE_FATAL;
  if (auto it = st.comms.find(comm); it != st.comms.end()) {
    handler = it->second.errhandler;
  } else if (auto w = st.comms.find(MPI_COMM_WORLD); w != st.comms.end()) {
    handler = w->second.errhandler;  // errors without a valid communicator
  }
  if (handler == MPI_ERRORS_RETURN) return error_class;
  const char* name = class_name(error_class);
  const std::string message = std::string(function) + ": " + (name ? name : "error") + ": " + what;
  if (from_network && st.session) ::sleep(2);
  std::fflush(stdout);
  std::fprintf(stderr, "gridbcast MPI rank %d: %s (MPI_ERRORS_ARE_FATAL)\n",
               st.world ? st.world->rank() : -1, message.c_str());
  abort_process(error_class, message);
}

void check_count(int count) {
  if (count < 0) throw Error(MPI_ERR_COUNT, "count " + std::to_string(count) + " is negative");
}

void check_buffer(const void* buf, std::uint64_t bytes) {
  if (buf == nullptr && bytes > 0)
    throw Error(MPI_ERR_BUFFER, "a null buffer for " + std::to_string(bytes) + " bytes");
}

void check_rank(const Comm& c, int rank, int error_class, const char* what) {
  if (rank < 0 || rank >= c.size())
    throw Error(error_class, std::string(what) + " " + std::to_string(rank) +
                                 " is outside the communicator's ranks 0.." +
                                 std::to_string(c.size() - 1));
}

void fill_status(MPI_Status* status, int source, int tag, std::uint64_t bytes) {
  if (status == MPI_STATUS_IGNORE || status == nullptr) return;
  status->MPI_SOURCE = source;
  status->MPI_TAG = tag;
  status->gridbcast_bytes = static_cast<long long>(bytes);
}

State& state() {
  static State st;
  return st;
}

void check_initialized() {
  const State& st = state();
  if (!st.initialized) throw Error(MPI_ERR_OTHER, "MPI is not initialized (call MPI_Init first)");
  if (st.finalized) throw Error(MPI_ERR_OTHER, "MPI is finalized");
}

Comm& comm_at(MPI_Comm comm) {
  check_initialized();
  auto& comms = state().comms;
  auto it = comms.find(comm);
  if (it == comms.end())
    throw Error(MPI_ERR_COMM, comm == MPI_COMM_NULL ? "MPI_COMM_NULL"
                                                    : "no communicator " + std::to_string(comm));
  return it->second;
}

const TypeInfo& type_at(MPI_Datatype type, bool need_committed) {
  static const std::map<MPI_Datatype, TypeInfo> kPredefined = [] {
    std::map<MPI_Datatype, TypeInfo> m;
    for (const auto& b : kBasicTypes) m[b.handle] = TypeInfo{b.size, b.handle, 1, true, true};
    return m;
  }();
  if (auto it = kPredefined.find(type); it != kPredefined.end()) return it->second;
  const auto& derived = state().derived;
  auto it = derived.find(type);
  if (it == derived.end())
    throw Error(MPI_ERR_TYPE, type == MPI_DATATYPE_NULL ? "MPI_DATATYPE_NULL"
                                                        : "no datatype " + std::to_string(type));
  if (need_committed && !it->second.committed)
    throw Error(MPI_ERR_TYPE,
                "datatype " + std::to_string(type) + " is not committed (MPI_Type_commit)");
  return it->second;
}

void abort_process(int code, const std::string& why) {
  State& st = state();
  std::fflush(stdout);
  std::fflush(stderr);
  if (st.session) {
    try {
      st.session->send(job::control::Abort{code, why});
    } catch (...) {
      // The launcher is gone; the exit status still tells.
    }
  }
  ::_exit((code & 0xff) != 0 ? (code & 0xff) : 1);
}

}  // namespace gridbcast::mpi

using namespace gridbcast::mpi;  // NOLINT: the C entry points below

#define GRIDBCAST_EXPORT extern "C" __attribute__((visibility("default")))
// MPI_x as a weak alias of PMPI_x: a profiling library may define MPI_x and
// call PMPI_x.
#define GRIDBCAST_ALIAS(name) \
  GRIDBCAST_EXPORT decltype(PMPI_##name) MPI_##name __attribute__((weak, alias("PMPI_" #name)));

GRIDBCAST_EXPORT int PMPI_Init(int*, char***) {
  return initialize(MPI_THREAD_SINGLE, nullptr);
}
GRIDBCAST_ALIAS(Init)

GRIDBCAST_EXPORT int PMPI_Init_thread(int*, char***, int required, int* provided) {
  return initialize(required, provided);
}
GRIDBCAST_ALIAS(Init_thread)

GRIDBCAST_EXPORT int PMPI_Initialized(int* flag) {
  if (flag) *flag = state().initialized ? 1 : 0;
  return MPI_SUCCESS;
}
GRIDBCAST_ALIAS(Initialized)

GRIDBCAST_EXPORT int PMPI_Finalized(int* flag) {
  if (flag) *flag = state().finalized ? 1 : 0;
  return MPI_SUCCESS;
}
GRIDBCAST_ALIAS(Finalized)

GRIDBCAST_EXPORT int PMPI_Query_thread(int* provided) {
  return guarded(MPI_COMM_WORLD, "MPI_Query_thread", [&] {
    check_initialized();
    if (provided) *provided = state().thread_level;
  });
}
GRIDBCAST_ALIAS(Query_thread)

GRIDBCAST_EXPORT int PMPI_Finalize(void) {
  const int rc = guarded(MPI_COMM_WORLD, "MPI_Finalize", [&] {
    check_initialized();
    State& st = state();
    flush_sends();  // MPI_Request_free'd sends included
    // Collective: nobody closes its connections while a peer still needs them.
    barrier(st.comms.at(MPI_COMM_WORLD));
    // What the program printed is out before the launcher can call the job
    // done (a rank stopped after that would lose its buffered output).
    std::fflush(stdout);
    std::fflush(stderr);
    if (st.session) {
      st.session->send(gridbcast::job::control::Finished{});
      st.session->close();
    }
  });
  if (rc != MPI_SUCCESS) return rc;
  State& st = state();
  st.finalized = true;
  st.world = nullptr;
  st.session.reset();
  st.singleton.reset();
  st.requests.clear();  // after the communicator: receives never matched were posted there
  return MPI_SUCCESS;
}
GRIDBCAST_ALIAS(Finalize)

GRIDBCAST_EXPORT int PMPI_Abort(MPI_Comm comm, int errorcode) {
  State& st = state();
  const int rank = st.world ? st.world->rank() : 0;
  (void)comm;  // the whole job ends, whatever the communicator
  std::fflush(stdout);
  std::fprintf(stderr, "gridbcast MPI: rank %d called MPI_Abort with error code %d\n", rank,
               errorcode);
  abort_process(errorcode, "");
}
GRIDBCAST_ALIAS(Abort)

GRIDBCAST_EXPORT double PMPI_Wtime(void) {
  // CLOCK_MONOTONIC: one clock for every process on a host.
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
GRIDBCAST_ALIAS(Wtime)

GRIDBCAST_EXPORT double PMPI_Wtick(void) {
  return std::chrono::duration<double>(std::chrono::steady_clock::duration(1)).count();
}
GRIDBCAST_ALIAS(Wtick)

GRIDBCAST_EXPORT int PMPI_Get_processor_name(char* name, int* resultlen) {
  return guarded(MPI_COMM_WORLD, "MPI_Get_processor_name", [&] {
    check_initialized();
    if (!name || !resultlen) throw Error(MPI_ERR_ARG, "null name or resultlen");
    const std::string& n = state().processor_name;
    const size_t len = std::min<size_t>(n.size(), MPI_MAX_PROCESSOR_NAME - 1);
    std::memcpy(name, n.data(), len);
    name[len] = '\0';
    *resultlen = static_cast<int>(len);
  });
}
GRIDBCAST_ALIAS(Get_processor_name)

GRIDBCAST_EXPORT int PMPI_Get_version(int* version, int* subversion) {
  if (version) *version = MPI_VERSION;
  if (subversion) *subversion = MPI_SUBVERSION;
  return MPI_SUCCESS;
}
GRIDBCAST_ALIAS(Get_version)

GRIDBCAST_EXPORT int PMPI_Get_library_version(char* version, int* resultlen) {
  if (!version || !resultlen) return MPI_ERR_ARG;
  const size_t len = std::strlen(kLibraryVersion);
  std::memcpy(version, kLibraryVersion, len + 1);
  *resultlen = static_cast<int>(len);
  return MPI_SUCCESS;
}
GRIDBCAST_ALIAS(Get_library_version)

GRIDBCAST_EXPORT int PMPI_Error_string(int errorcode, char* string, int* resultlen) {
  if (!string || !resultlen) return MPI_ERR_ARG;
  const char* name = class_name(errorcode);
  if (!name) {
    *resultlen = std::snprintf(string, MPI_MAX_ERROR_STRING, "unknown error code %d", errorcode);
    return MPI_ERR_ARG;
  }
  std::string text = name;
  const auto& details = state().last_detail;
  if (auto it = details.find(errorcode); it != details.end()) text += " (last: " + it->second + ")";
  const size_t len = std::min<size_t>(text.size(), MPI_MAX_ERROR_STRING - 1);
  std::memcpy(string, text.data(), len);
  string[len] = '\0';
  *resultlen = static_cast<int>(len);
  return MPI_SUCCESS;
}
GRIDBCAST_ALIAS(Error_string)

GRIDBCAST_EXPORT int PMPI_Error_class(int errorcode, int* errorclass) {
  if (!errorclass || !class_name(errorcode)) return MPI_ERR_ARG;
  *errorclass = errorcode;
  return MPI_SUCCESS;
}
GRIDBCAST_ALIAS(Error_class)

GRIDBCAST_EXPORT int PMPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler) {
  return guarded(comm, "MPI_Comm_set_errhandler", [&] {
    Comm& c = comm_at(comm);
    if (errhandler != MPI_ERRORS_ARE_FATAL && errhandler != MPI_ERRORS_RETURN)
      throw Error(MPI_ERR_ARG, "error handler " + std::to_string(errhandler) +
                                   " (MPI_ERRORS_ARE_FATAL and MPI_ERRORS_RETURN are provided)");
    c.errhandler = errhandler;
  });
}
GRIDBCAST_ALIAS(Comm_set_errhandler)

GRIDBCAST_EXPORT int PMPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler* errhandler) {
  return guarded(comm, "MPI_Comm_get_errhandler", [&] {
    const Comm& c = comm_at(comm);
    if (!errhandler) throw Error(MPI_ERR_ARG, "null errhandler");
    *errhandler = c.errhandler;
  });
}
GRIDBCAST_ALIAS(Comm_get_errhandler)

GRIDBCAST_EXPORT int PMPI_Errhandler_free(MPI_Errhandler* errhandler) {
  return guarded(MPI_COMM_WORLD, "MPI_Errhandler_free", [&] {
    if (!errhandler || (*errhandler != MPI_ERRORS_ARE_FATAL && *errhandler != MPI_ERRORS_RETURN))
      throw Error(MPI_ERR_ARG, "not an error handler");
    *errhandler = MPI_ERRHANDLER_NULL;  // predefined handlers stay valid
  });
}
GRIDBCAST_ALIAS(Errhandler_free)

GRIDBCAST_EXPORT int PMPI_Comm_rank(MPI_Comm comm, int* rank) {
  return guarded(comm, "MPI_Comm_rank", [&] {
    const Comm& c = comm_at(comm);
    if (!rank) throw Error(MPI_ERR_ARG, "null rank");
    *rank = c.rank;
  });
}
GRIDBCAST_ALIAS(Comm_rank)

GRIDBCAST_EXPORT int PMPI_Comm_size(MPI_Comm comm, int* size) {
  return guarded(comm, "MPI_Comm_size", [&] {
    const Comm& c = comm_at(comm);
    if (!size) throw Error(MPI_ERR_ARG, "null size");
    *size = c.size();
  });
}
GRIDBCAST_ALIAS(Comm_size)

GRIDBCAST_EXPORT int PMPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
  return guarded(comm, "MPI_Comm_dup", [&] {
    Comm& parent = comm_at(comm);
    if (!newcomm) throw Error(MPI_ERR_ARG, "null newcomm");
    Comm c;
    c.members = parent.members;
    c.context = derive_context(parent.context, parent.children++, INT64_MIN);
    c.errhandler = parent.errhandler;
    *newcomm = add_comm(std::move(c));
  });
}
GRIDBCAST_ALIAS(Comm_dup)

GRIDBCAST_EXPORT int PMPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  return guarded(comm, "MPI_Comm_split", [&] {
    Comm& parent = comm_at(comm);
    if (!newcomm) throw Error(MPI_ERR_ARG, "null newcomm");
    if (color < 0 && color != MPI_UNDEFINED)
      throw Error(MPI_ERR_ARG, "color " + std::to_string(color) + " is negative");
    const int mine[2] = {color, key};
    std::vector<int> all(2 * static_cast<size_t>(parent.size()));
    allgather_bytes(parent, mine, sizeof mine, all.data());
    const std::uint64_t n = parent.children++;
    if (color == MPI_UNDEFINED) {
      *newcomm = MPI_COMM_NULL;
      return;
    }
    std::vector<std::pair<int, int>> chosen;  // (key, parent rank)
    for (int r = 0; r < parent.size(); ++r)
      if (all[2 * static_cast<size_t>(r)] == color)
        chosen.emplace_back(all[2 * static_cast<size_t>(r) + 1], r);
    std::sort(chosen.begin(), chosen.end());  // by key, ties by parent rank
    Comm c;
    for (const auto& [k, r] : chosen) c.members.push_back(parent.members[static_cast<size_t>(r)]);
    c.context = derive_context(parent.context, n, color);
    c.errhandler = parent.errhandler;
    *newcomm = add_comm(std::move(c));
  });
}
GRIDBCAST_ALIAS(Comm_split)

GRIDBCAST_EXPORT int PMPI_Comm_free(MPI_Comm* comm) {
  return guarded(comm ? *comm : MPI_COMM_NULL, "MPI_Comm_free", [&] {
    if (!comm) throw Error(MPI_ERR_ARG, "null comm");
    Comm& c = comm_at(*comm);
    if (*comm == MPI_COMM_WORLD || *comm == MPI_COMM_SELF)
      throw Error(MPI_ERR_COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed");
    // Its broadcasts in flight end first (MPI: pending operations complete
    // normally); every member started them before this collective call.
    complete_collectives(*comm);
    if (c.group) state().world->forget_group(c.context);
    state().comms.erase(*comm);
    *comm = MPI_COMM_NULL;
  });
}
GRIDBCAST_ALIAS(Comm_free)

GRIDBCAST_EXPORT int PMPI_Type_size(MPI_Datatype datatype, int* size) {
  return guarded(MPI_COMM_WORLD, "MPI_Type_size", [&] {
    check_initialized();
    const TypeInfo& t = type_at(datatype, false);
    if (!size) throw Error(MPI_ERR_ARG, "null size");
    *size = t.size > static_cast<std::uint64_t>(INT_MAX) ? MPI_UNDEFINED : static_cast<int>(t.size);
  });
}
GRIDBCAST_ALIAS(Type_size)

GRIDBCAST_EXPORT int PMPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype* newtype) {
  return guarded(MPI_COMM_WORLD, "MPI_Type_contiguous", [&] {
    check_initialized();
    check_count(count);
    const TypeInfo old = type_at(oldtype, false);
    if (!newtype) throw Error(MPI_ERR_ARG, "null newtype");
    State& st = state();
    TypeInfo t;
    t.size = old.size * static_cast<std::uint64_t>(count);
    t.base = old.base;
    t.count = old.count * static_cast<std::uint64_t>(count);
    t.committed = false;
    t.predefined = false;
    *newtype = st.next_type++;
    st.derived[*newtype] = t;
  });
}
GRIDBCAST_ALIAS(Type_contiguous)

GRIDBCAST_EXPORT int PMPI_Type_commit(MPI_Datatype* datatype) {
  return guarded(MPI_COMM_WORLD, "MPI_Type_commit", [&] {
    check_initialized();
    if (!datatype) throw Error(MPI_ERR_ARG, "null datatype");
    type_at(*datatype, false);
    if (auto it = state().derived.find(*datatype); it != state().derived.end())
      it->second.committed = true;
  });
}
GRIDBCAST_ALIAS(Type_commit)

GRIDBCAST_EXPORT int PMPI_Type_free(MPI_Datatype* datatype) {
  return guarded(MPI_COMM_WORLD, "MPI_Type_free", [&] {
    check_initialized();
    if (!datatype) throw Error(MPI_ERR_ARG, "null datatype");
    if (type_at(*datatype, false).predefined)
      throw Error(MPI_ERR_TYPE, "a predefined datatype cannot be freed");
    state().derived.erase(*datatype);
    *datatype = MPI_DATATYPE_NULL;
  });
}
GRIDBCAST_ALIAS(Type_free)

GRIDBCAST_EXPORT int PMPI_Get_count(const MPI_Status* status, MPI_Datatype datatype, int* count) {
  return guarded(MPI_COMM_WORLD, "MPI_Get_count", [&] {
    if (!status || status == MPI_STATUS_IGNORE || !count)
      throw Error(MPI_ERR_ARG, "null status or count");
    const TypeInfo& t = type_at(datatype, true);
    const auto bytes = static_cast<std::uint64_t>(status->gridbcast_bytes);
    if (t.size == 0) {
      *count = 0;
    } else if (bytes % t.size != 0 || bytes / t.size > static_cast<std::uint64_t>(INT_MAX)) {
      *count = MPI_UNDEFINED;
    } else {
      *count = static_cast<int>(bytes / t.size);
    }
  });
}
GRIDBCAST_ALIAS(Get_count)

GRIDBCAST_EXPORT int PMPI_Send(const void* buf, int count, MPI_Datatype datatype, int dest, int tag,
                               MPI_Comm comm) {
  return guarded(comm, "MPI_Send", [&] {
    Comm& c = comm_at(comm);
    check_count(count);
    const std::uint64_t bytes = type_at(datatype).size * static_cast<std::uint64_t>(count);
    if (tag < 0) throw Error(MPI_ERR_TAG, "tag " + std::to_string(tag) + " (tags are 0..INT_MAX)");
    if (dest == MPI_PROC_NULL) return;
    check_rank(c, dest, MPI_ERR_RANK, "destination");
    check_buffer(buf, bytes);
    state().world->send(c.members[static_cast<size_t>(dest)], c.context, tag, buf, bytes);
  });
}
GRIDBCAST_ALIAS(Send)

GRIDBCAST_EXPORT int PMPI_Recv(void* buf, int count, MPI_Datatype datatype, int source, int tag,
                               MPI_Comm comm, MPI_Status* status) {
  return guarded(comm, "MPI_Recv", [&] {
    Comm& c = comm_at(comm);
    check_count(count);
    const std::uint64_t capacity = type_at(datatype).size * static_cast<std::uint64_t>(count);
    if (tag < 0 && tag != MPI_ANY_TAG)
      throw Error(MPI_ERR_TAG, "tag " + std::to_string(tag) + " (0..INT_MAX or MPI_ANY_TAG)");
    if (source == MPI_PROC_NULL) {
      fill_status(status, MPI_PROC_NULL, MPI_ANY_TAG, 0);
      return;
    }
    if (source != MPI_ANY_SOURCE) check_rank(c, source, MPI_ERR_RANK, "source");
    check_buffer(buf, capacity);
    std::optional<int> from;
    if (source != MPI_ANY_SOURCE) from = c.members[static_cast<size_t>(source)];
    std::optional<std::int64_t> want_tag;
    if (tag != MPI_ANY_TAG) want_tag = tag;
    const auto got = state().world->receive(from, c.context, want_tag, buf, capacity);
    fill_status(status, c.rank_of.at(got.source), static_cast<int>(got.tag),
                std::min(got.bytes, capacity));
    if (got.bytes > capacity)
      throw Error(MPI_ERR_TRUNCATE, "a message of " + std::to_string(got.bytes) +
                                        " bytes from rank " +
                                        std::to_string(c.rank_of.at(got.source)) +
                                        " into a buffer of " + std::to_string(capacity));
  });
}
GRIDBCAST_ALIAS(Recv)

GRIDBCAST_EXPORT int PMPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                MPI_Comm comm) {
  return guarded(comm, "MPI_Bcast", [&] {
    Comm& c = comm_at(comm);
    check_count(count);
    const std::uint64_t bytes = type_at(datatype).size * static_cast<std::uint64_t>(count);
    check_rank(c, root, MPI_ERR_ROOT, "root");
    check_buffer(buffer, bytes);
    bcast_bytes(c, buffer, bytes, root);
  });
}
GRIDBCAST_ALIAS(Bcast)

GRIDBCAST_EXPORT int PMPI_Barrier(MPI_Comm comm) {
  return guarded(comm, "MPI_Barrier", [&] { barrier(comm_at(comm)); });
}
GRIDBCAST_ALIAS(Barrier)

GRIDBCAST_EXPORT int PMPI_Reduce(const void* sendbuf, void* recvbuf, int count,
                                 MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
  return guarded(comm, "MPI_Reduce", [&] {
    Comm& c = comm_at(comm);
    check_count(count);
    const TypeInfo& t = type_at(datatype);
    check_rank(c, root, MPI_ERR_ROOT, "root");
    check_reduction(op, t);
    const std::uint64_t bytes = t.size * static_cast<std::uint64_t>(count);
    if (sendbuf == MPI_IN_PLACE && c.rank != root)
      throw Error(MPI_ERR_BUFFER, "MPI_IN_PLACE is the root's send buffer only");
    if (sendbuf != MPI_IN_PLACE) check_buffer(sendbuf, bytes);
    if (c.rank == root) check_buffer(recvbuf, bytes);
    reduce(c, sendbuf, recvbuf, t.count * static_cast<std::uint64_t>(count), t.base, bytes, op,
           root);
  });
}
GRIDBCAST_ALIAS(Reduce)

GRIDBCAST_EXPORT int PMPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return guarded(comm, "MPI_Allreduce", [&] {
    Comm& c = comm_at(comm);
    check_count(count);
    const TypeInfo& t = type_at(datatype);
    check_reduction(op, t);
    const std::uint64_t bytes = t.size * static_cast<std::uint64_t>(count);
    if (sendbuf != MPI_IN_PLACE) check_buffer(sendbuf, bytes);
    check_buffer(recvbuf, bytes);
    // Reduce to rank 0, then its broadcast: every rank ends with identical bits.
    reduce(c, sendbuf, recvbuf, t.count * static_cast<std::uint64_t>(count), t.base, bytes, op, 0);
    bcast_bytes(c, recvbuf, bytes, 0);
  });
}
GRIDBCAST_ALIAS(Allreduce)

GRIDBCAST_EXPORT int PMPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                 MPI_Comm comm) {
  return guarded(comm, "MPI_Gather", [&] {
    Comm& c = comm_at(comm);
    check_rank(c, root, MPI_ERR_ROOT, "root");
    const bool in_place = sendbuf == MPI_IN_PLACE;
    if (in_place && c.rank != root)
      throw Error(MPI_ERR_BUFFER, "MPI_IN_PLACE is the root's send buffer only");
    std::uint64_t send_bytes = 0;
    if (!in_place) {
      check_count(sendcount);
      send_bytes = type_at(sendtype).size * static_cast<std::uint64_t>(sendcount);
      check_buffer(sendbuf, send_bytes);
    }
    State& st = state();
    if (c.rank != root) {
      st.world->send(c.members[static_cast<size_t>(root)], c.collective_context(), 3500, sendbuf,
                     send_bytes);
      return;
    }
    check_count(recvcount);
    const std::uint64_t slot = type_at(recvtype).size * static_cast<std::uint64_t>(recvcount);
    check_buffer(recvbuf, slot * static_cast<std::uint64_t>(c.size()));
    auto* out = static_cast<std::byte*>(recvbuf);
    if (!in_place) {
      if (send_bytes > slot)
        throw Error(MPI_ERR_TRUNCATE, "the root sends " + std::to_string(send_bytes) +
                                          " bytes into a slot of " + std::to_string(slot));
      if (send_bytes > 0)
        std::memmove(out + slot * static_cast<std::uint64_t>(root), sendbuf, send_bytes);
    }
    std::string truncated;
    for (int r = 0; r < c.size(); ++r) {
      if (r == root) continue;
      const auto got = st.world->receive(c.members[static_cast<size_t>(r)], c.collective_context(),
                                         3500, out + slot * static_cast<std::uint64_t>(r), slot);
      if (got.bytes > slot && truncated.empty())
        truncated = "rank " + std::to_string(r) + " sent " + std::to_string(got.bytes) +
                    " bytes into a slot of " + std::to_string(slot);
    }
    if (!truncated.empty()) throw Error(MPI_ERR_TRUNCATE, truncated);
  });
}
GRIDBCAST_ALIAS(Gather)
