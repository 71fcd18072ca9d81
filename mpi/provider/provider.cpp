// libgridbcast_mpi_provider_<openmpi|mpich>.so: gridbcast's broadcast inside
// real MPI applications, through the PMPI profiling interface. Link it before
// the MPI library or LD_PRELOAD it; it defines MPI_Bcast, MPI_Ibcast (with the
// MPI_Wait and MPI_Test families, inside which it moves the broadcasts in
// flight) and MPI_Finalize (to print its statistics and release what it
// holds), and calls PMPI_* for everything else. docs/MPI.md describes the
// environment:
//
//   GRIDBCAST_TRANSPORT  mpi (default): the plan runs over PMPI_Isend/PMPI_Irecv;
//                        lanes: over gridbcast lanes, one runtime::Communicator
//                        per MPI communicator (endpoints via PMPI_Allgather)
//   GRIDBCAST_TOPOLOGY   a site-config; ranks are mapped onto it by host name.
//                        Without it: one site, a node per rank, grouped by host
//   GRIDBCAST_ALGORITHM  auto (default), random, or an algorithm name
//   GRIDBCAST_MIN_BYTES  below this many bytes (default 64 KiB): PMPI_Bcast
//   GRIDBCAST_SEGMENT    pipelining segment (default: the topology's, or automatic)
//   GRIDBCAST_TIMEOUT    seconds without progress before a lanes broadcast fails
//                        (default: none, as MPI waits)
//   GRIDBCAST_ADDRESS    this host's address for lanes (default: loopback when all
//                        ranks share a host, else the first non-loopback IPv4)
//   GRIDBCAST_HIERARCHY  auto (default), node or flat: whether one leader per node
//                        runs the plan between nodes and PMPI_Bcast serves each node
//   GRIDBCAST_HOST       the host name used for placement (default: uname's)
//   GRIDBCAST_STATS      1: a line at MPI_Finalize (rank 0) counting each path; all: every rank
//
// Decisions depend only on what every rank of the communicator agrees on (the
// byte count, the communicator, the environment), so all ranks always take the
// same path. Datatypes that are not contiguous are packed (PMPI_Pack) into a
// staging buffer and unpacked after, so ranks whose typemaps differ (legal when
// the type signatures match) still agree.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/utsname.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mpi/provider/placement.hpp"
#include "mpi/provider/pmpi_executor.hpp"
#include "runtime/communicator.hpp"
#include "runtime/endpoints.hpp"
#include "topology/loader.hpp"
#include "topology/plan/plan.hpp"
#include "topology/plan/segments.hpp"
#include "topology/select.hpp"
#include "topology/simulate.hpp"
#include "topology/units.hpp"

namespace gridbcast::mpi::provider {
namespace {

#ifndef GRIDBCAST_MPI_FLAVOUR
#define GRIDBCAST_MPI_FLAVOUR "mpi"
#endif

enum class Transport { kMpi, kLanes };

// kAuto: hierarchical when there is more than one node and some node has more
// than one rank; kNode: always (when the communicator has several ranks);
// kFlat: one grid node per rank, as before hierarchies.
enum class Hierarchy { kAuto, kNode, kFlat };

// PMPI_Bcast and PMPI_Send count in int: the node phase moves pieces of at most this.
constexpr std::uint64_t kMaxPiece = std::uint64_t{1} << 30;
// Over PMPI a rank forwards a segment once all of it has arrived (store and
// forward, pmpi_executor.cpp): the model prices its segments so.
const topology::CostModel kStoreAndForward = topology::store_and_forward_model();

// How long a failing MPI_Bcast waits after printing why, before its error handler runs.
constexpr std::chrono::milliseconds kErrorDrain{200};

struct Config {
  Transport transport = Transport::kMpi;
  std::optional<topology::Algorithm> algorithm;
  bool random = false;
  std::uint64_t min_bytes = 64 * 1024;
  std::uint64_t segment_bytes = 0;
  std::optional<topology::Grid> topology;
  std::chrono::milliseconds timeout = runtime::kNoTimeout;
  std::string address;
  std::string host;  // GRIDBCAST_HOST, else the kernel's host name
  Hierarchy hierarchy = Hierarchy::kAuto;
  int stats = 0;  // 0 off, 1 rank 0 of MPI_COMM_WORLD, 2 every rank
  topology::SelectionThresholds thresholds;
};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

Config load_config() {
  Config c;
  const std::string transport = env("GRIDBCAST_TRANSPORT");
  if (transport == "lanes") {
    c.transport = Transport::kLanes;
  } else if (!transport.empty() && transport != "mpi") {
    throw std::runtime_error("GRIDBCAST_TRANSPORT=\"" + transport + "\" is neither mpi nor lanes");
  }
  const std::string algorithm = env("GRIDBCAST_ALGORITHM");
  if (algorithm == "random") {
    c.random = true;
  } else if (!algorithm.empty() && algorithm != "auto") {
    c.algorithm = topology::parse_algorithm(algorithm);
    if (!c.algorithm) {
      std::string all;
      for (const auto& a : topology::algorithms()) all += " " + std::string(a.name);
      throw std::runtime_error("GRIDBCAST_ALGORITHM=\"" + algorithm +
                               "\" is not auto, random or one of:" + all);
    }
  }
  auto size = [](const char* name, std::uint64_t& out) {
    const std::string v = env(name);
    if (v.empty()) return;
    try {
      out = topology::parse_size(v);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(name) + "=\"" + v + "\": " + e.what());
    }
  };
  size("GRIDBCAST_MIN_BYTES", c.min_bytes);
  size("GRIDBCAST_SEGMENT", c.segment_bytes);
  if (const std::string path = env("GRIDBCAST_TOPOLOGY"); !path.empty())
    c.topology = topology::load_grid_file(path);
  if (const std::string t = env("GRIDBCAST_TIMEOUT"); !t.empty()) {
    char* end = nullptr;
    const double seconds = std::strtod(t.c_str(), &end);
    if (end == t.c_str() || *end != '\0' || seconds <= 0)
      throw std::runtime_error("GRIDBCAST_TIMEOUT=\"" + t +
                               "\" is not a positive number of seconds");
    c.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  c.address = env("GRIDBCAST_ADDRESS");
  c.host = env("GRIDBCAST_HOST");
  if (const std::string h = env("GRIDBCAST_HIERARCHY"); h == "node") {
    c.hierarchy = Hierarchy::kNode;
  } else if (h == "flat") {
    c.hierarchy = Hierarchy::kFlat;
  } else if (!h.empty() && h != "auto") {
    throw std::runtime_error("GRIDBCAST_HIERARCHY=\"" + h + "\" is not auto, node or flat");
  }
  const std::string stats = env("GRIDBCAST_STATS");
  c.stats = stats == "all" ? 2 : (!stats.empty() && stats != "0") ? 1 : 0;
  c.thresholds = topology::SelectionThresholds::from_environment();
  return c;
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (PMPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string(what) + " failed: " + mpi_error(rc));
}

std::string hostname() {
  struct utsname u {};
  return ::uname(&u) == 0 ? u.nodename : "localhost";
}

// The first IPv4 address of an interface that is up and not loopback.
std::string own_address() {
  struct ifaddrs* list = nullptr;
  std::string found;
  if (::getifaddrs(&list) == 0) {
    for (auto* a = list; a && found.empty(); a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      if ((a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP)) continue;
      char text[INET_ADDRSTRLEN];
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) found = text;
    }
    ::freeifaddrs(list);
  }
  return found.empty() ? "127.0.0.1" : found;
}

// Fixed-width strings through PMPI_Allgather.
std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine, int size) {
  constexpr int kWidth = 256;
  std::array<char, kWidth> out{};
  std::memcpy(out.data(), mine.data(), std::min<size_t>(mine.size(), kWidth - 1));
  std::vector<char> all(static_cast<size_t>(kWidth) * static_cast<size_t>(size));
  check(PMPI_Allgather(out.data(), kWidth, MPI_CHAR, all.data(), kWidth, MPI_CHAR, comm),
        "PMPI_Allgather");
  std::vector<std::string> result;
  for (int r = 0; r < size; ++r) result.emplace_back(all.data() + static_cast<size_t>(r) * kWidth);
  return result;
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// What the provider keeps per MPI communicator, made at its first broadcast
// that takes the gridbcast path (collectively: every rank is in that call).
//
// Hierarchical (GRIDBCAST_HIERARCHY), a grid node is a node of ranks (those
// sharing memory and a host name), not a rank; per broadcast the root stands
// in for its node's leader (node-local rank 0) with the mpi transport:
//
//   node A: [0]* 1 2 3      [k]: runs the plan between nodes (leader, or the root)
//   node B: [4]  5 6 7      then PMPI_Bcast on each node's comm from [k]
//
// The placement's grid then has one node per node of ranks; grid_of_comm maps
// every rank to its node's grid rank and comm_of_grid each grid rank to its
// leader.
struct CommState {
  MPI_Comm priv = MPI_COMM_NULL;  // a duplicate for our own messages
  int rank = 0;
  int size = 0;
  int tag_ub = 32767;
  Placement placement;
  bool hierarchical = false;
  MPI_Comm node = MPI_COMM_NULL;     // hierarchical: this rank's node
  MPI_Comm leaders = MPI_COMM_NULL;  // hierarchical lanes: the leaders (others: null)
  std::vector<int> leader_of;        // hierarchical: rank -> its node leader's rank
  std::vector<int> local_rank_of;    // hierarchical: rank -> its rank in its node
  std::unique_ptr<runtime::Communicator> lanes;
  std::string fallback;  // non-empty: setup failed somewhere; PMPI_Bcast from now on
  std::uint64_t bcasts = 0;
  // This communicator's MPI_Ibcasts through gridbcast, in the order they were
  // started; the first one runs (they share s.priv's tags and the links).
  std::deque<struct Ibcast*> ibcasts;
  topology::AutoChoices auto_choices;  // what `auto` chose, by grid root and size class
};

struct Stats {
  std::uint64_t calls = 0;
  std::map<std::string, std::uint64_t> gridbcast;  // by algorithm
  std::uint64_t packed = 0;
  std::uint64_t hierarchical = 0;
  std::uint64_t small = 0;
  std::uint64_t trivial = 0;  // intercommunicator, one rank, or arguments PMPI_Bcast rejects
  std::uint64_t fallback = 0;
  // MPI_Ibcast: through gridbcast (by algorithm), or PMPI_Ibcast.
  std::uint64_t icalls = 0;
  std::map<std::string, std::uint64_t> igridbcast;
  std::uint64_t ismall = 0;
  std::uint64_t ihierarchical = 0;  // of the gridbcast ones: through the nodes' leaders
  std::uint64_t iother = 0;         // intercommunicator, one rank, invalid, failed set-up
};

struct Provider {
  std::mutex mutex;
  std::optional<Config> config;
  std::string config_error;
  int keyval = MPI_KEYVAL_INVALID;
  std::vector<MPI_Comm> retired;  // private duplicates to free (not inside a delete callback)
  std::map<CommState*, MPI_Comm> live;
  Stats stats;
};

Provider& provider() {
  static Provider p;
  return p;
}

void drain(CommState& s);

int delete_state(MPI_Comm, int, void* value, void*) {
  auto* s = static_cast<CommState*>(value);
  // MPI_Comm_free with an MPI_Ibcast in flight: it completes first (every
  // member started it before this collective call).
  drain(*s);
  Provider& p = provider();
  std::lock_guard lock(p.mutex);
  p.live.erase(s);
  for (MPI_Comm c : {s->leaders, s->node, s->priv})
    if (c != MPI_COMM_NULL) p.retired.push_back(c);
  delete s;
  return MPI_SUCCESS;
}

void free_retired(Provider& p) {
  std::vector<MPI_Comm> comms;
  {
    std::lock_guard lock(p.mutex);
    comms.swap(p.retired);
  }
  for (MPI_Comm& c : comms) PMPI_Comm_free(&c);
}

// The node structure: ranks that share memory (PMPI_Comm_split_type) and a
// host name (GRIDBCAST_HOST can tell apart what shares memory) form a node,
// its rank 0 (the lowest rank) its leader. Collective over s.priv; fills
// s.node, s.leader_of and s.local_rank_of.
void split_nodes(CommState& s, const std::vector<std::string>& hosts) {
  MPI_Comm shared = MPI_COMM_NULL;
  check(PMPI_Comm_split_type(s.priv, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &shared),
        "PMPI_Comm_split_type");
  const int host_index = static_cast<int>(
      std::find(hosts.begin(), hosts.end(), hosts[static_cast<size_t>(s.rank)]) - hosts.begin());
  const int rc = PMPI_Comm_split(shared, host_index, s.rank, &s.node);
  PMPI_Comm_free(&shared);
  check(rc, "PMPI_Comm_split");
  int local = 0;
  check(PMPI_Comm_rank(s.node, &local), "PMPI_Comm_rank");
  // The leader is the node's lowest rank: the split kept the order of ranks.
  int leader = local == 0 ? s.rank : -1;
  check(PMPI_Bcast(&leader, 1, MPI_INT, 0, s.node), "PMPI_Bcast");
  s.leader_of.resize(static_cast<size_t>(s.size));
  check(PMPI_Allgather(&leader, 1, MPI_INT, s.leader_of.data(), 1, MPI_INT, s.priv),
        "PMPI_Allgather");
  s.local_rank_of.assign(static_cast<size_t>(s.size), 0);
  std::map<int, int> members;  // leader -> ranks counted so far
  for (int r = 0; r < s.size; ++r)
    s.local_rank_of[static_cast<size_t>(r)] = members[s.leader_of[static_cast<size_t>(r)]]++;
}

// Collective over `comm`: every rank builds the same placement; with lanes,
// rank 0 draws the job secret and everyone's ports are exchanged. A failure
// on any rank makes every rank fall back to PMPI_Bcast for this communicator.
std::unique_ptr<CommState> set_up(MPI_Comm comm, const Config& config) {
  auto s = std::make_unique<CommState>();
  check(PMPI_Comm_rank(comm, &s->rank), "PMPI_Comm_rank");
  check(PMPI_Comm_size(comm, &s->size), "PMPI_Comm_size");
  check(PMPI_Comm_dup(comm, &s->priv), "PMPI_Comm_dup");
  check(PMPI_Comm_set_errhandler(s->priv, MPI_ERRORS_RETURN), "PMPI_Comm_set_errhandler");
  int* tag_ub = nullptr;
  int flag = 0;
  if (PMPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &flag) == MPI_SUCCESS && flag && tag_ub)
    s->tag_ub = *tag_ub;

  std::string failure;
  const std::vector<std::string> hosts =
      allgather_strings(s->priv, config.host.empty() ? hostname() : config.host, s->size);
  const bool one_host =
      std::all_of(hosts.begin(), hosts.end(), [&](const auto& h) { return h == hosts[0]; });
  std::string address = config.address;
  if (address.empty()) address = one_host ? "127.0.0.1" : own_address();
  const std::vector<std::string> addresses = allgather_strings(s->priv, address, s->size);

  // The nodes of ranks, and whether the broadcast goes through them: decided
  // from gathered data, so every rank decides the same.
  std::vector<int> leaders;  // in rank order: node i's leader
  if (config.hierarchy != Hierarchy::kFlat) {
    split_nodes(*s, hosts);
    for (int r = 0; r < s->size; ++r)
      if (s->leader_of[static_cast<size_t>(r)] == r) leaders.push_back(r);
    const bool shared = static_cast<int>(leaders.size()) < s->size;
    s->hierarchical = config.hierarchy == Hierarchy::kNode || (shared && leaders.size() > 1);
    if (!s->hierarchical) {
      PMPI_Comm_free(&s->node);
      s->leader_of.clear();
      s->local_rank_of.clear();
    }
  }
  try {
    if (s->hierarchical) {
      std::vector<std::string> node_hosts, node_addresses;
      for (int l : leaders) {
        node_hosts.push_back(hosts[static_cast<size_t>(l)]);
        node_addresses.push_back(addresses[static_cast<size_t>(l)]);
      }
      const Placement nodes = config.topology ? map_placement(*config.topology, node_hosts)
                                              : infer_placement(node_hosts, node_addresses);
      // Node i (of `leaders`) -> grid rank; every rank -> its node's grid rank.
      s->placement.grid = nodes.grid;
      s->placement.comm_of_grid.resize(leaders.size());
      for (size_t i = 0; i < leaders.size(); ++i)
        s->placement.comm_of_grid[static_cast<size_t>(nodes.grid_of_comm[i])] = leaders[i];
      s->placement.grid_of_comm.resize(static_cast<size_t>(s->size));
      for (int r = 0; r < s->size; ++r) {
        const auto i =
            std::find(leaders.begin(), leaders.end(), s->leader_of[static_cast<size_t>(r)]) -
            leaders.begin();
        s->placement.grid_of_comm[static_cast<size_t>(r)] =
            nodes.grid_of_comm[static_cast<size_t>(i)];
      }
    } else {
      s->placement = config.topology ? map_placement(*config.topology, hosts)
                                     : infer_placement(hosts, addresses);
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }

  if (config.transport == Transport::kLanes) {
    // Who runs lanes: every rank, or (hierarchical) the leaders, over their
    // own communicator; members[i] is member i's rank in s->priv.
    MPI_Comm lanes_comm = s->priv;
    std::vector<int> members(static_cast<size_t>(s->size));
    for (int r = 0; r < s->size; ++r) members[static_cast<size_t>(r)] = r;
    if (s->hierarchical) {
      const bool leader = s->leader_of[static_cast<size_t>(s->rank)] == s->rank;
      check(PMPI_Comm_split(s->priv, leader ? 0 : MPI_UNDEFINED, s->rank, &s->leaders),
            "PMPI_Comm_split");
      lanes_comm = s->leaders;
      members = leaders;
    }
    // One node: nothing to move between nodes, no lanes.
    if (lanes_comm != MPI_COMM_NULL && s->placement.grid.size() > 1) {
      int me = 0;
      check(PMPI_Comm_rank(lanes_comm, &me), "PMPI_Comm_rank");
      const int count = static_cast<int>(members.size());
      // The job secret, id and run nonce: drawn by member 0 for this
      // initialisation, known to this communicator only.
      std::array<std::uint8_t, 40 + runtime::kRunNonceBytes> secret{};
      if (me == 0) {
        const auto creds = runtime::new_credentials();
        const auto nonce = runtime::new_run_nonce();
        std::memcpy(secret.data(), creds.secret.data(), 32);
        std::memcpy(secret.data() + 32, &creds.job_id, 8);
        std::memcpy(secret.data() + 40, nonce.data(), nonce.size());
      }
      check(PMPI_Bcast(secret.data(), static_cast<int>(secret.size()), MPI_BYTE, 0, lanes_comm),
            "PMPI_Bcast");
      runtime::JobCredentials creds;
      creds.secret.assign(secret.begin(), secret.begin() + 32);
      std::memcpy(&creds.job_id, secret.data() + 32, 8);
      runtime::RunNonce run_nonce{};
      std::memcpy(run_nonce.data(), secret.data() + 40, run_nonce.size());
      runtime::LanePorts ports{};
      if (failure.empty()) {
        try {
          runtime::CommOptions options;
          options.timeout = config.timeout;
          options.segment_bytes = config.segment_bytes;
          options.thresholds = config.thresholds;
          const int g = s->placement.grid_of_comm[static_cast<size_t>(s->rank)];
          s->lanes = std::make_unique<runtime::Communicator>(s->placement.grid, g, creds, options);
          ports = s->lanes->listen();
        } catch (const std::exception& e) {
          failure = e.what();
        }
      }
      std::vector<std::uint16_t> all(static_cast<size_t>(count) * runtime::kMaxLanes);
      check(PMPI_Allgather(ports.data(), runtime::kMaxLanes, MPI_UNSIGNED_SHORT, all.data(),
                           runtime::kMaxLanes, MPI_UNSIGNED_SHORT, lanes_comm),
            "PMPI_Allgather");
      if (failure.empty() && s->lanes) {
        runtime::EndpointTable table(static_cast<size_t>(s->placement.grid.size()));
        for (int m = 0; m < count; ++m) {
          const int g =
              s->placement.grid_of_comm[static_cast<size_t>(members[static_cast<size_t>(m)])];
          for (int l = 0; l < runtime::kMaxLanes; ++l)
            table[static_cast<size_t>(g)][static_cast<size_t>(l)] =
                all[static_cast<size_t>(m) * runtime::kMaxLanes + static_cast<size_t>(l)];
        }
        // A rank whose set-up failed sent no ports; it says so itself, and the
        // Allreduce below turns every rank to the fallback.
        bool complete = true;
        for (const auto& lanes : table) complete = complete && lanes[0] != 0;
        try {
          if (complete) s->lanes->set_endpoints(std::move(table), run_nonce);
        } catch (const std::exception& e) {
          failure = e.what();
        }
        // While a lanes broadcast waits, keep the MPI library progressing the
        // application's own requests (MPI's progress rule).
        MPI_Comm priv = s->priv;
        s->lanes->set_idle_hook([priv] {
          int f = 0;
          PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, priv, &f, MPI_STATUS_IGNORE);
        });
      }
    }
  }

  int failed = failure.empty() ? 0 : 1, any = 0;
  check(PMPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, s->priv), "PMPI_Allreduce");
  if (any) {
    s->fallback = failure.empty() ? "set-up failed on another rank" : failure;
    s->lanes.reset();
    if (!failure.empty())
      std::fprintf(stderr,
                   "gridbcast provider: rank %d of a communicator of %d: %s; this communicator "
                   "uses PMPI_Bcast\n",
                   s->rank, s->size, failure.c_str());
  }
  return s;
}

CommState& state_of(MPI_Comm comm, const Config& config) {
  Provider& p = provider();
  {
    std::lock_guard lock(p.mutex);
    if (p.keyval == MPI_KEYVAL_INVALID)
      check(PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &p.keyval, nullptr),
            "PMPI_Comm_create_keyval");
  }
  void* value = nullptr;
  int flag = 0;
  check(PMPI_Comm_get_attr(comm, p.keyval, &value, &flag), "PMPI_Comm_get_attr");
  if (flag) return *static_cast<CommState*>(value);
  auto s = set_up(comm, config);
  check(PMPI_Comm_set_attr(comm, p.keyval, s.get()), "PMPI_Comm_set_attr");
  std::lock_guard lock(p.mutex);
  p.live[s.get()] = comm;
  return *s.release();
}

topology::Algorithm choose(const Config& config, CommState& s, std::uint64_t bytes, int root) {
  if (config.random) {
    // What this grid can run; datagrams need the lanes transport.
    auto all = topology::available_algorithms(s.placement.grid);
    if (config.transport != Transport::kLanes) std::erase(all, topology::Algorithm::kMulticast);
    return all[mix(s.bcasts * 7919u + static_cast<std::uint64_t>(s.size)) % all.size()];
  }
  if (config.algorithm) return *config.algorithm;
  topology::SelectionThresholds t = config.thresholds;
  if (config.transport != Transport::kLanes) t.multicast_bytes = 0;  // datagrams need lanes
  return s.auto_choices.choose(s.placement.grid,
                               s.placement.grid_of_comm[static_cast<size_t>(root)], bytes, t);
}

int ibcasts_in_flight();
void progress_ibcasts();

// Runs `plan`'s inter-node (or, flat, inter-rank) part over PMPI on s.priv.
void run_over_pmpi(CommState& s, const Config& config, std::byte* data, std::uint64_t bytes,
                   topology::Algorithm algo, int root_grid, const std::vector<int>& comm_of_grid) {
  const topology::Plan plan = topology::build_plan(s.placement.grid, algo, root_grid, bytes);
  PmpiOptions o;
  o.comm = s.priv;
  o.tag_ub = s.tag_ub;
  o.segment_bytes = topology::resolve_segment_bytes(s.placement.grid, plan, config.segment_bytes,
                                                    kStoreAndForward);
  PmpiBroadcast b(plan, s.placement.grid_of_comm[static_cast<size_t>(s.rank)], comm_of_grid, data,
                  o);
  // With MPI_Ibcasts in flight, theirs move while this one waits (a rank of
  // theirs may wait for this rank to forward before it can join this one).
  while (!b.step(ibcasts_in_flight() == 0))
    if (ibcasts_in_flight() > 0) progress_ibcasts();
}

// Hierarchical: between nodes, then within each node.
//   mpi:   the root stands in for its node's leader in the plan (no extra hop);
//   lanes: the leaders hold the lanes, so a root that is not its node's leader
//          first hands the bytes to it over PMPI (shared memory).
// Then PMPI_Bcast on every node's communicator, from the root on its node and
// from the leader elsewhere.
void broadcast_hierarchical(CommState& s, const Config& config, std::byte* data,
                            std::uint64_t bytes, int root, topology::Algorithm algo) {
  const int root_grid = s.placement.grid_of_comm[static_cast<size_t>(root)];
  const int root_leader = s.leader_of[static_cast<size_t>(root)];
  const bool leader = s.leader_of[static_cast<size_t>(s.rank)] == s.rank;
  if (s.placement.grid.size() > 1) {
    if (config.transport == Transport::kLanes) {  // s.lanes: on the leaders only
      if (root != root_leader && (s.rank == root || s.rank == root_leader)) {
        for (std::uint64_t at = 0; at < bytes; at += kMaxPiece) {
          const int n = static_cast<int>(std::min(kMaxPiece, bytes - at));
          if (s.rank == root) {
            check(PMPI_Send(data + at, n, MPI_BYTE, root_leader, 0, s.priv), "PMPI_Send");
          } else {
            check(PMPI_Recv(data + at, n, MPI_BYTE, root, 0, s.priv, MPI_STATUS_IGNORE),
                  "PMPI_Recv");
          }
        }
      }
      if (leader) {
        if (!s.lanes) throw std::logic_error("a leader without lanes");
        s.lanes->bcast(data, bytes, root_grid, algo);
      }
    } else if (root_grid == s.placement.grid_of_comm[static_cast<size_t>(s.rank)] ? s.rank == root
                                                                                  : leader) {
      std::vector<int> comm_of_grid = s.placement.comm_of_grid;
      comm_of_grid[static_cast<size_t>(root_grid)] = root;
      run_over_pmpi(s, config, data, bytes, algo, root_grid, comm_of_grid);
    }
  }
  int node_size = 0;
  check(PMPI_Comm_size(s.node, &node_size), "PMPI_Comm_size");
  if (node_size > 1) {
    const int local_root = s.leader_of[static_cast<size_t>(s.rank)] == root_leader
                               ? s.local_rank_of[static_cast<size_t>(root)]
                               : 0;
    for (std::uint64_t at = 0; at < bytes; at += kMaxPiece)
      check(PMPI_Bcast(data + at, static_cast<int>(std::min(kMaxPiece, bytes - at)), MPI_BYTE,
                       local_root, s.node),
            "PMPI_Bcast");
  }
}

// The gridbcast path for `bytes` contiguous bytes at `data`.
topology::Algorithm broadcast(CommState& s, const Config& config, std::byte* data,
                              std::uint64_t bytes, int root) {
  const auto algo = choose(config, s, bytes, root);
  ++s.bcasts;
  if (s.hierarchical) {
    broadcast_hierarchical(s, config, data, bytes, root, algo);
    return algo;
  }
  const int root_grid = s.placement.grid_of_comm[static_cast<size_t>(root)];
  if (s.lanes) {
    s.lanes->bcast(data, bytes, root_grid, algo);
    return algo;
  }
  run_over_pmpi(s, config, data, bytes, algo, root_grid, s.placement.comm_of_grid);
  return algo;
}

// Packs (or unpacks) `count` elements between the user's buffer and `packed`,
// in pieces whose byte counts fit PMPI_Pack's int.
void pack(void* buffer, int count, MPI_Datatype type, MPI_Count size, MPI_Count extent,
          std::byte* packed, MPI_Comm comm, bool to_packed) {
  if (size > INT_MAX)
    throw std::runtime_error("a non-contiguous datatype of " + std::to_string(size) +
                             " bytes per element (PMPI_Pack counts in int)");
  const int per_piece =
      size == 0 ? count : static_cast<int>(std::max<MPI_Count>(1, INT_MAX / size));
  for (int first = 0; first < count; first += per_piece) {
    const int n = std::min(per_piece, count - first);
    auto* user = static_cast<std::byte*>(buffer) + static_cast<MPI_Aint>(first) * extent;
    std::byte* at = packed + static_cast<std::uint64_t>(first) * static_cast<std::uint64_t>(size);
    const int piece = static_cast<int>(n * size);
    int position = 0;
    if (to_packed) {
      check(PMPI_Pack(user, n, type, at, piece, &position, comm), "PMPI_Pack");
    } else {
      check(PMPI_Unpack(at, piece, &position, user, n, type, comm), "PMPI_Unpack");
    }
    if (position != piece)
      throw std::runtime_error(std::string(to_packed ? "PMPI_Pack" : "PMPI_Unpack") + " moved " +
                               std::to_string(position) + " bytes for " + std::to_string(piece) +
                               " bytes of data");
  }
}

// One call counted (`calls`: MPI_Bcast's or MPI_Ibcast's) under the path it took.
void tally(std::uint64_t Stats::*calls, std::uint64_t Stats::*field) {
  Provider& p = provider();
  std::lock_guard lock(p.mutex);
  ++(p.stats.*calls);
  ++(p.stats.*field);
}

const Config* config_or_abort() {
  Provider& p = provider();
  std::lock_guard lock(p.mutex);
  if (!p.config && p.config_error.empty()) {
    try {
      p.config = load_config();
    } catch (const std::exception& e) {
      p.config_error = e.what();
    }
  }
  if (!p.config) {
    std::fprintf(stderr, "gridbcast provider: %s\n", p.config_error.c_str());
    // MPICH's launcher stops the whole job at the first abort and drops
    // output it has not forwarded yet: give it a moment to pass the reason on
    // (under load it lost the line above now and then).
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    PMPI_Abort(MPI_COMM_WORLD, 1);
    return nullptr;
  }
  return &*p.config;
}

// An MPI_Ibcast through gridbcast: a generalized request the application
// holds (PMPI_Grequest_start), progressed by the provider inside MPI_Wait*,
// MPI_Test*, MPI_Ibcast and MPI_Bcast, and completed (PMPI_Grequest_complete)
// when this rank's part is done. Freed by MPI when the application has
// completed the request.
struct Ibcast {
  MPI_Request request = MPI_REQUEST_NULL;
  CommState* state = nullptr;
  const Config* config = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  int root = 0;
  topology::Algorithm algo{};
  std::byte* data = nullptr;  // the bytes moved: the user's, or `packed`
  std::uint64_t bytes = 0;
  std::vector<std::byte> packed;  // a datatype that is not contiguous
  void* user = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Count type_size = 0;
  MPI_Count extent = 0;
  std::unique_ptr<PmpiBroadcast> pmpi;  // started, over PMPI
  runtime::P2pRequest lanes;            // started, over lanes
  // Its stages: 0 not started; 1 the hand-off to the root's node leader
  // (hierarchical lanes); 2 between the nodes (or, flat, the ranks); 3 within
  // each node (hierarchical); 4 done. `host`: the host MPI's requests of the
  // current stage.
  int stage = 0;
  std::vector<MPI_Request> host;
  std::string error;
};

std::recursive_mutex& ibcast_mutex() {
  static std::recursive_mutex m;
  return m;
}
std::atomic<int> g_ibcasts{0};         // started and not complete
std::set<CommState*>& busy_states() {  // communicators with MPI_Ibcasts queued
  static std::set<CommState*> s;
  return s;
}

int ibcasts_in_flight() {
  return g_ibcasts.load(std::memory_order_relaxed);
}

int query_ibcast(void* extra, MPI_Status* status) {
  const auto* b = static_cast<const Ibcast*>(extra);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  status->MPI_ERROR = b->error.empty() ? MPI_SUCCESS : MPI_ERR_OTHER;
  return status->MPI_ERROR;
}
int free_ibcast(void* extra) {
  delete static_cast<Ibcast*>(extra);
  return MPI_SUCCESS;
}
int cancel_ibcast(void*, int) {
  return MPI_SUCCESS;  // a broadcast cannot be taken back; it completes
}

// Whether the host requests of the current stage have all completed.
bool host_done(Ibcast& b) {
  if (b.host.empty()) return true;
  int flag = 0;
  check(PMPI_Testall(static_cast<int>(b.host.size()), b.host.data(), &flag, MPI_STATUSES_IGNORE),
        "PMPI_Testall");
  if (flag) b.host.clear();
  return flag != 0;
}

// Moves one MPI_Ibcast on as far as it can without blocking, through the
// stages of MPI_Bcast's path (broadcast_hierarchical, run_over_pmpi): the
// same hand-off, plan and node phase, each started when the one before is
// complete on this rank. True when this rank's part is done; throws on error.
bool step_ibcast(Ibcast& b) {
  CommState& s = *b.state;
  const bool lanes = b.config->transport == Transport::kLanes;
  const int root_grid = s.placement.grid_of_comm[static_cast<size_t>(b.root)];
  const int me_grid = s.placement.grid_of_comm[static_cast<size_t>(s.rank)];
  const int root_leader = s.hierarchical ? s.leader_of[static_cast<size_t>(b.root)] : b.root;
  const bool leader = !s.hierarchical || s.leader_of[static_cast<size_t>(s.rank)] == s.rank;
  for (;;) {
    switch (b.stage) {
      case 0:
        b.stage = 1;
        // Lanes between nodes are the leaders': a root that is not its node's
        // leader hands the bytes to it first.
        if (s.hierarchical && lanes && s.placement.grid.size() > 1 && b.root != root_leader &&
            (s.rank == b.root || s.rank == root_leader))
          for (std::uint64_t at = 0; at < b.bytes; at += kMaxPiece) {
            const int n = static_cast<int>(std::min(kMaxPiece, b.bytes - at));
            MPI_Request r;
            if (s.rank == b.root)
              check(PMPI_Isend(b.data + at, n, MPI_BYTE, root_leader, 0, s.priv, &r), "PMPI_Isend");
            else
              check(PMPI_Irecv(b.data + at, n, MPI_BYTE, b.root, 0, s.priv, &r), "PMPI_Irecv");
            b.host.push_back(r);
          }
        break;
      case 1:
        if (!host_done(b)) return false;
        b.stage = 2;
        if (s.hierarchical && s.placement.grid.size() <= 1) break;
        if (lanes) {
          if (leader) b.lanes = s.lanes->ibcast(b.data, b.bytes, root_grid, b.algo);
        } else if (!s.hierarchical || (root_grid == me_grid ? s.rank == b.root : leader)) {
          // Over PMPI the root stands in for its node's leader (no extra hop).
          std::vector<int> comm_of_grid = s.placement.comm_of_grid;
          comm_of_grid[static_cast<size_t>(root_grid)] = b.root;
          const topology::Plan plan =
              topology::build_plan(s.placement.grid, b.algo, root_grid, b.bytes);
          PmpiOptions o;
          o.comm = s.priv;
          o.tag_ub = s.tag_ub;
          o.segment_bytes = topology::resolve_segment_bytes(
              s.placement.grid, plan, b.config->segment_bytes, kStoreAndForward);
          b.pmpi =
              std::make_unique<PmpiBroadcast>(plan, me_grid, std::move(comm_of_grid), b.data, o);
        }
        break;
      case 2:
        if (b.pmpi && !b.pmpi->step(false)) return false;
        if (b.lanes) {
          s.lanes->poll();
          const runtime::P2pState st = s.lanes->state(b.lanes);
          if (!st.error.empty()) throw std::runtime_error(st.error);
          if (!st.complete) return false;
        }
        b.stage = 3;
        if (s.hierarchical) {
          int node_size = 0;
          check(PMPI_Comm_size(s.node, &node_size), "PMPI_Comm_size");
          if (node_size > 1) {
            const int local_root = s.leader_of[static_cast<size_t>(s.rank)] == root_leader
                                       ? s.local_rank_of[static_cast<size_t>(b.root)]
                                       : 0;
            for (std::uint64_t at = 0; at < b.bytes; at += kMaxPiece) {
              MPI_Request r;
              check(PMPI_Ibcast(b.data + at, static_cast<int>(std::min(kMaxPiece, b.bytes - at)),
                                MPI_BYTE, local_root, s.node, &r),
                    "PMPI_Ibcast");
              b.host.push_back(r);
            }
          }
        }
        break;
      case 3:
        if (!host_done(b)) return false;
        b.stage = 4;
        break;
      default:
        return true;
    }
  }
}

// Moves the communicator's first MPI_Ibcast without blocking; completes it
// (and starts the next) when done. Caller holds ibcast_mutex().
void advance(CommState& s) {
  while (!s.ibcasts.empty()) {
    Ibcast& b = *s.ibcasts.front();
    bool done = false;
    try {
      done = step_ibcast(b);
    } catch (const std::exception& e) {
      b.error = e.what();
      done = true;
    }
    if (!done) return;
    if (b.error.empty() && !b.packed.empty() && s.rank != b.root) {
      try {
        pack(b.user, b.count, b.type, b.type_size, b.extent, b.packed.data(), b.comm, false);
      } catch (const std::exception& e) {
        b.error = e.what();
      }
    }
    if (!b.error.empty()) {
      int rank = -1;
      PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
      std::fprintf(stderr,
                   "gridbcast provider: MPI_Ibcast failed on rank %d (of MPI_COMM_WORLD): %s\n",
                   rank, b.error.c_str());
    }
    s.ibcasts.pop_front();
    g_ibcasts.fetch_sub(1, std::memory_order_relaxed);
    PMPI_Grequest_complete(b.request);  // MPI may free `b` from here on
  }
  busy_states().erase(&s);
}

void progress_ibcasts() {
  std::lock_guard lock(ibcast_mutex());
  const std::vector<CommState*> busy(busy_states().begin(), busy_states().end());
  for (CommState* s : busy) advance(*s);
}

void drain(CommState& s) {
  while (!s.ibcasts.empty()) progress_ibcasts();
}

// The blocking calls of the MPI_Wait family while MPI_Ibcasts are in flight:
// the non-blocking test, with the broadcasts moved between tries (a rank that
// waits for anything may be the one the others' broadcast must pass through).
template <typename Test>
int wait_moving_ibcasts(Test test) {
  for (;;) {
    progress_ibcasts();
    bool finished = false;
    const int rc = test(finished);
    if (rc != MPI_SUCCESS || finished) return rc;
  }
}

// What a broadcast call (MPI_Bcast, MPI_Ibcast) asks of the provider: which
// path it takes and the datatype's geometry. Every rank decides the same from
// what the ranks agree on (the byte count, the communicator, the environment).
struct Call {
  enum Path {
    kHost,       // PMPI's: its own argument errors, intercommunicators, one rank
    kSmall,      // PMPI's: below GRIDBCAST_MIN_BYTES
    kGridbcast,  // ours
    kNoConfig,   // the environment is wrong: the job was aborted
  } path = kHost;
  const Config* config = nullptr;
  std::uint64_t bytes = 0;
  MPI_Count type_size = 0, extent = 0, true_lb = 0;
  bool contiguous = true;
};

Call classify(int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  Call c;
  int initialized = 0, finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  if (!initialized || finalized || comm == MPI_COMM_NULL || count < 0 ||
      datatype == MPI_DATATYPE_NULL)
    return c;
  c.config = config_or_abort();
  if (!c.config) {
    c.path = Call::kNoConfig;
    return c;
  }
  int inter = 0, size = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return c;
  if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || size <= 1 || root < 0 || root >= size) return c;
  MPI_Count lb = 0, true_extent = 0;
  if (PMPI_Type_size_x(datatype, &c.type_size) != MPI_SUCCESS || c.type_size == MPI_UNDEFINED ||
      PMPI_Type_get_extent_x(datatype, &lb, &c.extent) != MPI_SUCCESS ||
      PMPI_Type_get_true_extent_x(datatype, &c.true_lb, &true_extent) != MPI_SUCCESS)
    return c;
  c.bytes = static_cast<std::uint64_t>(c.type_size) * static_cast<std::uint64_t>(count);
  c.contiguous = (count == 1 || c.extent == c.type_size) && true_extent == c.type_size;
  c.path = c.bytes < c.config->min_bytes ? Call::kSmall : Call::kGridbcast;
  return c;
}

// A failed broadcast call: said on standard error, then the communicator's
// error handler (by default it aborts the job).
int fail_call(MPI_Comm comm, const char* function, const std::exception& e) {
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "gridbcast provider: %s failed on rank %d (of MPI_COMM_WORLD): %s\n",
               function, rank, e.what());
  // The default error handler aborts the job; MPICH's launcher may tear its
  // output forwarding down before it has read this line (1 run in 15 lost
  // it), so give it a moment. Only on this failure path.
  std::this_thread::sleep_for(kErrorDrain);
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

}  // namespace
}  // namespace gridbcast::mpi::provider

using namespace gridbcast::mpi::provider;  // NOLINT: the C entry points below

#define GRIDBCAST_EXPORT extern "C" __attribute__((visibility("default")))

GRIDBCAST_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                               MPI_Comm comm) {
  auto pmpi = [&](std::uint64_t Stats::*field) {
    tally(&Stats::calls, field);
    return PMPI_Bcast(buffer, count, datatype, root, comm);
  };
  const Call c = classify(count, datatype, root, comm);
  if (c.path == Call::kNoConfig) return MPI_ERR_OTHER;
  if (c.path == Call::kHost) return pmpi(&Stats::trivial);
  if (c.path == Call::kSmall) return pmpi(&Stats::small);
  try {
    free_retired(provider());
    CommState& s = state_of(comm, *c.config);
    if (!s.fallback.empty()) return pmpi(&Stats::fallback);
    drain(s);  // this communicator's MPI_Ibcasts started before this call go first
    gridbcast::topology::Algorithm algo;
    if (c.contiguous) {
      algo = broadcast(s, *c.config, static_cast<std::byte*>(buffer) + c.true_lb, c.bytes, root);
    } else {
      std::vector<std::byte> packed(c.bytes);
      if (s.rank == root)
        pack(buffer, count, datatype, c.type_size, c.extent, packed.data(), comm, true);
      algo = broadcast(s, *c.config, packed.data(), c.bytes, root);
      if (s.rank != root)
        pack(buffer, count, datatype, c.type_size, c.extent, packed.data(), comm, false);
    }
    Provider& p = provider();
    std::lock_guard lock(p.mutex);
    ++p.stats.calls;
    ++p.stats.gridbcast[std::string(gridbcast::topology::algorithm_name(algo))];
    if (!c.contiguous) ++p.stats.packed;
    if (s.hierarchical) ++p.stats.hierarchical;
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return fail_call(comm, "MPI_Bcast", e);
  }
}

GRIDBCAST_EXPORT int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                MPI_Comm comm, MPI_Request* request) {
  auto pmpi = [&](std::uint64_t Stats::*field) {
    tally(&Stats::icalls, field);
    return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
  };
  const Call c = request ? classify(count, datatype, root, comm) : Call{};
  if (c.path == Call::kNoConfig) return MPI_ERR_OTHER;
  if (c.path == Call::kHost) return pmpi(&Stats::iother);
  if (c.path == Call::kSmall) return pmpi(&Stats::ismall);
  try {
    free_retired(provider());
    CommState& s = state_of(comm, *c.config);
    if (!s.fallback.empty()) return pmpi(&Stats::iother);
    auto b = std::make_unique<Ibcast>();
    b->state = &s;
    b->config = c.config;
    b->comm = comm;
    b->root = root;
    b->bytes = c.bytes;
    b->algo = choose(*c.config, s, c.bytes, root);
    ++s.bcasts;
    if (c.contiguous) {
      b->data = static_cast<std::byte*>(buffer) + c.true_lb;
    } else {
      b->packed.resize(c.bytes);
      b->data = b->packed.data();
      b->user = buffer;
      b->count = count;
      b->type = datatype;
      b->type_size = c.type_size;
      b->extent = c.extent;
      if (s.rank == root)
        pack(buffer, count, datatype, c.type_size, c.extent, b->packed.data(), comm, true);
    }
    check(PMPI_Grequest_start(query_ibcast, free_ibcast, cancel_ibcast, b.get(), &b->request),
          "PMPI_Grequest_start");
    *request = b->request;
    {
      Provider& p = provider();
      std::lock_guard lock(p.mutex);
      ++p.stats.icalls;
      ++p.stats.igridbcast[std::string(gridbcast::topology::algorithm_name(b->algo))];
      if (s.hierarchical) ++p.stats.ihierarchical;
    }
    std::lock_guard lock(ibcast_mutex());
    s.ibcasts.push_back(b.release());
    g_ibcasts.fetch_add(1, std::memory_order_relaxed);
    busy_states().insert(&s);
    advance(s);  // starts it now if it is the communicator's first
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return fail_call(comm, "MPI_Ibcast", e);
  }
}

// The MPI_Wait and MPI_Test families: the MPI_Ibcasts in flight move first
// (and the waits keep moving them), then the host MPI does the rest, its own
// requests and the generalized ones of completed MPI_Ibcasts alike.
GRIDBCAST_EXPORT int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (ibcasts_in_flight() == 0) return PMPI_Wait(request, status);
  return wait_moving_ibcasts([&](bool& finished) {
    int flag = 0;
    const int rc = PMPI_Test(request, &flag, status);
    finished = flag != 0;
    return rc;
  });
}

GRIDBCAST_EXPORT int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  if (ibcasts_in_flight() == 0) return PMPI_Waitall(count, requests, statuses);
  return wait_moving_ibcasts([&](bool& finished) {
    int flag = 0;
    const int rc = PMPI_Testall(count, requests, &flag, statuses);
    finished = flag != 0;
    return rc;
  });
}

GRIDBCAST_EXPORT int MPI_Waitany(int count, MPI_Request requests[], int* index,
                                 MPI_Status* status) {
  if (ibcasts_in_flight() == 0) return PMPI_Waitany(count, requests, index, status);
  return wait_moving_ibcasts([&](bool& finished) {
    int flag = 0;
    const int rc = PMPI_Testany(count, requests, index, &flag, status);
    finished = flag != 0;
    return rc;
  });
}

GRIDBCAST_EXPORT int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                                  MPI_Status statuses[]) {
  if (ibcasts_in_flight() == 0)
    return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  return wait_moving_ibcasts([&](bool& finished) {
    const int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    finished = *outcount != 0;  // some completed, or none was active (MPI_UNDEFINED)
    return rc;
  });
}

GRIDBCAST_EXPORT int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (ibcasts_in_flight() > 0) progress_ibcasts();
  return PMPI_Test(request, flag, status);
}

GRIDBCAST_EXPORT int MPI_Testall(int count, MPI_Request requests[], int* flag,
                                 MPI_Status statuses[]) {
  if (ibcasts_in_flight() > 0) progress_ibcasts();
  return PMPI_Testall(count, requests, flag, statuses);
}

GRIDBCAST_EXPORT int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag,
                                 MPI_Status* status) {
  if (ibcasts_in_flight() > 0) progress_ibcasts();
  return PMPI_Testany(count, requests, index, flag, status);
}

GRIDBCAST_EXPORT int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                                  MPI_Status statuses[]) {
  if (ibcasts_in_flight() > 0) progress_ibcasts();
  return PMPI_Testsome(incount, requests, outcount, indices, statuses);
}

GRIDBCAST_EXPORT int MPI_Finalize(void) {
  Provider& p = provider();
  int initialized = 0, finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  if (initialized && !finalized) {
    // MPI_Ibcasts nobody completed (erroneous, but their peers may wait for
    // this rank's part): finished before the statistics and the release.
    while (ibcasts_in_flight() > 0) progress_ibcasts();
    const Config* config = nullptr;
    {
      std::lock_guard lock(p.mutex);
      if (p.config) config = &*p.config;
    }
    int stats_wanted = config ? config->stats : 0;
    if (!config) {
      const char* v = std::getenv("GRIDBCAST_STATS");
      stats_wanted = v && std::string(v) == "all" ? 2 : (v && *v && std::string(v) != "0") ? 1 : 0;
    }
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (stats_wanted == 2 || (stats_wanted == 1 && rank == 0)) {
      std::lock_guard lock(p.mutex);
      const Stats& s = p.stats;
      std::uint64_t ours = 0;
      std::string algos;
      for (const auto& [name, n] : s.gridbcast) {
        ours += n;
        algos += (algos.empty() ? "" : ", ") + name + " " + std::to_string(n);
      }
      std::uint64_t iours = 0;
      std::string ialgos;
      for (const auto& [name, n] : s.igridbcast) {
        iours += n;
        ialgos += (ialgos.empty() ? "" : ", ") + name + " " + std::to_string(n);
      }
      const char* transport = env("GRIDBCAST_TRANSPORT") == "lanes" ? "lanes" : "mpi";
      std::fprintf(
          stderr,
          "gridbcast provider (%s, transport %s) rank %d: %llu MPI_Bcast: %llu gridbcast "
          "(%s%s%llu packed, %llu hierarchical), "
          "%llu PMPI_Bcast (%llu below %llu bytes, %llu intercommunicator/one "
          "rank/invalid, %llu after a failed set-up); %llu MPI_Ibcast: %llu gridbcast "
          "(%s%s%llu hierarchical), %llu PMPI_Ibcast (%llu below the threshold, %llu "
          "other)\n",
          GRIDBCAST_MPI_FLAVOUR, transport, rank, static_cast<unsigned long long>(s.calls),
          static_cast<unsigned long long>(ours), algos.c_str(), algos.empty() ? "" : "; ",
          static_cast<unsigned long long>(s.packed),
          static_cast<unsigned long long>(s.hierarchical),
          static_cast<unsigned long long>(s.small + s.trivial + s.fallback),
          static_cast<unsigned long long>(s.small),
          static_cast<unsigned long long>(config ? config->min_bytes : 65536),
          static_cast<unsigned long long>(s.trivial), static_cast<unsigned long long>(s.fallback),
          static_cast<unsigned long long>(s.icalls), static_cast<unsigned long long>(iours),
          ialgos.c_str(), ialgos.empty() ? "" : "; ",
          static_cast<unsigned long long>(s.ihierarchical),
          static_cast<unsigned long long>(s.ismall + s.iother),
          static_cast<unsigned long long>(s.ismall), static_cast<unsigned long long>(s.iother));
    }
    // Release every communicator's state (MPI_COMM_WORLD's attributes are not
    // deleted by MPI_Finalize), then the duplicates.
    std::map<CommState*, MPI_Comm> live;
    {
      std::lock_guard lock(p.mutex);
      live = p.live;
    }
    for (const auto& [state, comm] : live) PMPI_Comm_delete_attr(comm, p.keyval);
    free_retired(p);
    if (p.keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&p.keyval);
  }
  return PMPI_Finalize();
}
