#include "job/bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "runtime/buffer.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::job {
namespace {

using Clock = std::chrono::steady_clock;

// The bench's own message context ("bench" in ASCII), apart from any other user
// of the communicator's messages.
constexpr std::uint64_t kBenchContext = 0x62656e6368000000ull;
constexpr std::int64_t kTagReport = 1;  // rank -> root: a double, after each sample
constexpr std::int64_t kTagGo = 2;      // root -> rank: 1 = another sample, 0 = stop
constexpr std::int64_t kTagPing = 3;
constexpr std::int64_t kTagPong = 4;
constexpr std::int64_t kTagAck = 5;
constexpr int kRttProbes = 5;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double rel_stdev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double sq = 0;
  for (double x : v) sq += (x - m) * (x - m);
  const double sd = std::sqrt(sq / static_cast<double>(v.size() - 1));
  return m > 0 ? sd / m : 0;
}

// The untimed synchronisation between samples: every other rank reports a
// value to the root; the root then tells each whether another sample follows.
class Sync {
 public:
  Sync(runtime::Communicator& c, int root, std::function<void()> on_alive)
      : c_(c), root_(root), on_alive_(std::move(on_alive)) {}

  // Root: every rank's value (its own at `root`); others: empty.
  std::vector<double> gather(double value) {
    if (c_.rank() != root_) {
      c_.send(root_, kBenchContext, kTagReport, &value, sizeof value);
      return {};
    }
    std::vector<double> all(static_cast<size_t>(c_.size()), 0.0);
    all[static_cast<size_t>(root_)] = value;
    for (int r = 0; r < c_.size(); ++r) {
      if (r == root_) continue;
      double v = 0;
      const auto got = c_.receive(r, kBenchContext, kTagReport, &v, sizeof v);
      if (got.bytes != sizeof v)
        throw std::runtime_error("bench: rank " + std::to_string(r) + " sent a malformed report");
      all[static_cast<size_t>(r)] = v;
    }
    return all;
  }

  // Root decides `go`; every rank returns it.
  bool release(bool go) {
    std::uint8_t flag = go ? 1 : 0;
    if (c_.rank() == root_ && on_alive_ && Clock::now() >= next_alive_) {
      on_alive_();
      next_alive_ = Clock::now() + std::chrono::seconds(1);
    }
    if (c_.rank() == root_) {
      for (int r = 0; r < c_.size(); ++r)
        if (r != root_) c_.send(r, kBenchContext, kTagGo, &flag, 1);
    } else {
      c_.receive(root_, kBenchContext, kTagGo, &flag, 1);
    }
    return flag == 1;
  }

  // Both: report, then learn whether another sample follows.
  bool step(double value, bool go_if_root, std::vector<double>* values = nullptr) {
    auto v = gather(value);
    if (values) *values = std::move(v);
    return release(go_if_root);
  }

 private:
  runtime::Communicator& c_;
  int root_;
  std::function<void()> on_alive_;
  Clock::time_point next_alive_ = Clock::now();
};

// The root's view of one series of samples.
struct Series {
  std::vector<double> samples;
  BenchStop stop = BenchStop::kStdev;

  // True when another sample is wanted; sets `stop` otherwise.
  bool want_more(const BenchSpec& spec, Clock::time_point deadline) {
    const int n = static_cast<int>(samples.size());
    if (n >= spec.min_iterations && rel_stdev(samples) < spec.target_rel_stdev) {
      stop = BenchStop::kStdev;
      return false;
    }
    if (n >= spec.max_iterations) {
      stop = BenchStop::kCap;
      return false;
    }
    if (n >= 2 && Clock::now() >= deadline) {
      stop = BenchStop::kTime;
      return false;
    }
    return true;
  }
};

class PointRunner {
 public:
  PointRunner(runtime::Communicator& c, const BenchSpec& spec, int root, std::byte* buffer,
              std::function<void()> on_alive)
      : c_(c), spec_(spec), root_(root), buffer_(buffer), sync_(c, root, std::move(on_alive)) {}

  BenchPoint run(const std::string& algorithm, std::uint64_t bytes) {
    algorithm_ = algorithm == "auto" ? std::nullopt : topology::parse_algorithm(algorithm);
    if (algorithm != "auto" && !algorithm_)
      throw std::runtime_error("bench: unknown algorithm \"" + algorithm + "\"");
    bytes_ = bytes;
    point_ = BenchPoint{};
    point_.algorithm = algorithm;
    point_.bytes = bytes;
    point_.root = root_;
    point_.rank_us.assign(static_cast<size_t>(c_.size()), 0.0);
    start_ = Clock::now();
    // Every copy starts empty, so the check afterwards sees what this point delivered.
    if (c_.rank() != root_ && bytes > 0) std::memset(buffer_, 0, bytes);
    // `auto` prices a size class on its first broadcast: here, untimed.
    if (!algorithm_) (void)c_.auto_algorithm(bytes, root_);
    sync_.step(0, true);
    if (c_.size() == 1) bcast();  // nothing to time, but say what would run

    switch (spec_.method) {
      case BenchMethod::kAck:
        run_ack();
        break;
      case BenchMethod::kBarrier:
        run_barrier();
        break;
      case BenchMethod::kRounds:
        run_rounds();
        break;
    }

    const bool ok = c_.rank() == root_ ||
                    runtime::matches_pattern(buffer_, bytes, spec_.largest_size(), spec_.seed);
    if (!ok)
      throw std::runtime_error("bench: rank " + std::to_string(c_.rank()) +
                               "'s copy differs from the root's data after " + point_.used +
                               " of " + std::to_string(bytes) + " bytes");
    sync_.step(1, true);  // every rank checked its copy
    point_.verified = true;
    return point_;
  }

 private:
  void bcast() {
    const runtime::BcastInfo info = c_.bcast(buffer_, bytes_, root_, algorithm_);
    point_.used = std::string(topology::algorithm_name(info.algorithm));
  }

  // The rest of the point's time budget, shared fairly among the series left.
  Clock::time_point series_deadline(int series_left) const {
    const auto end = start_ + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(spec_.max_seconds));
    const auto now = Clock::now();
    if (now >= end) return now;
    return now + (end - now) / std::max(1, series_left);
  }

  void finish_series(const Series& s) {
    point_.iterations = std::max(point_.iterations, static_cast<int>(s.samples.size()));
    const double sd = rel_stdev(s.samples);
    if (sd >= point_.rel_stdev) {
      point_.rel_stdev = sd;
      point_.stop = s.stop;
    }
    if (s.stop != BenchStop::kStdev && point_.stop == BenchStop::kStdev) point_.stop = s.stop;
  }

  void warm_up() {
    for (int w = 0; w < spec_.warmup; ++w) {
      bcast();
      sync_.step(0, true);
    }
  }

  // The root's round trip to `peer` (the smallest of a few), in seconds.
  double round_trip(int peer) {
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k < kRttProbes; ++k) {
      if (c_.rank() == root_) {
        const auto t0 = Clock::now();
        c_.send(peer, kBenchContext, kTagPing, nullptr, 0);
        c_.receive(peer, kBenchContext, kTagPong, nullptr, 0);
        best = std::min(best, seconds_since(t0));
      } else if (c_.rank() == peer) {
        c_.receive(root_, kBenchContext, kTagPing, nullptr, 0);
        c_.send(root_, kBenchContext, kTagPong, nullptr, 0);
      }
    }
    return c_.rank() == root_ ? best : 0;
  }

  void run_ack() {
    const bool is_root = c_.rank() == root_;
    int left = c_.size() - 1;
    for (int i = 0; i < c_.size(); ++i) {
      if (i == root_) continue;
      const double rtt = round_trip(i);
      sync_.step(0, true);
      point_.rtt_us = std::max(point_.rtt_us, rtt * 1e6 / 2);
      warm_up();
      Series s;
      const auto deadline = series_deadline(left--);
      for (bool go = true; go;) {
        const auto t0 = Clock::now();
        bcast();
        if (c_.rank() == i) c_.send(root_, kBenchContext, kTagAck, nullptr, 0);
        if (is_root) {
          c_.receive(i, kBenchContext, kTagAck, nullptr, 0);
          s.samples.push_back(std::max(0.0, seconds_since(t0) - rtt / 2));
        }
        go = sync_.step(0, is_root && s.want_more(spec_, deadline));
      }
      if (is_root) {
        point_.rank_us[static_cast<size_t>(i)] = mean(s.samples) * 1e6;
        finish_series(s);
      }
    }
  }

  void run_barrier() {
    const bool is_root = c_.rank() == root_;
    warm_up();
    Series slowest;  // per sample, the slowest rank's time
    std::vector<std::vector<double>> per_rank(static_cast<size_t>(c_.size()));
    const auto deadline = series_deadline(1);
    for (bool go = true; go;) {
      const auto t0 = Clock::now();
      bcast();
      const double mine = seconds_since(t0);
      std::vector<double> all = sync_.gather(mine);
      if (is_root) {
        double worst = 0;
        for (int r = 0; r < c_.size(); ++r) {
          if (r == root_) continue;
          per_rank[static_cast<size_t>(r)].push_back(all[static_cast<size_t>(r)]);
          worst = std::max(worst, all[static_cast<size_t>(r)]);
        }
        slowest.samples.push_back(worst);
      }
      go = sync_.release(is_root && slowest.want_more(spec_, deadline));
    }
    if (!is_root) return;
    for (int r = 0; r < c_.size(); ++r)
      if (r != root_)
        point_.rank_us[static_cast<size_t>(r)] = mean(per_rank[static_cast<size_t>(r)]) * 1e6;
    finish_series(slowest);
  }

  void run_rounds() {
    const bool is_root = c_.rank() == root_;
    warm_up();
    Series s;
    const auto deadline = series_deadline(1);
    const int rounds = std::max(1, spec_.rounds);
    for (bool go = true; go;) {
      const auto t0 = Clock::now();
      for (int k = 0; k < rounds; ++k) bcast();
      sync_.gather(0);  // the root's clock stops when the last rank has reported
      if (is_root) s.samples.push_back(seconds_since(t0) / rounds);
      go = sync_.release(is_root && s.want_more(spec_, deadline));
    }
    if (!is_root) return;
    for (int r = 0; r < c_.size(); ++r)
      if (r != root_) point_.rank_us[static_cast<size_t>(r)] = mean(s.samples) * 1e6;
    finish_series(s);
  }

  runtime::Communicator& c_;
  const BenchSpec& spec_;
  const int root_;
  std::byte* const buffer_;
  Sync sync_;
  std::optional<topology::Algorithm> algorithm_;
  std::uint64_t bytes_ = 0;
  BenchPoint point_;
  Clock::time_point start_;
};

std::string number(double v) {
  std::ostringstream o;
  o << std::setprecision(17) << v;
  return o.str();
}

}  // namespace

const char* bench_method_name(BenchMethod m) {
  switch (m) {
    case BenchMethod::kAck:
      return "ack";
    case BenchMethod::kBarrier:
      return "barrier";
    case BenchMethod::kRounds:
      return "rounds";
  }
  return "?";
}

BenchMethod parse_bench_method(const std::string& name) {
  for (auto m : {BenchMethod::kAck, BenchMethod::kBarrier, BenchMethod::kRounds})
    if (name == bench_method_name(m)) return m;
  throw std::invalid_argument("unknown method \"" + name + "\"; one of ack, barrier, rounds");
}

const char* bench_stop_name(BenchStop s) {
  switch (s) {
    case BenchStop::kStdev:
      return "stdev";
    case BenchStop::kCap:
      return "cap";
    case BenchStop::kTime:
      return "time";
  }
  return "?";
}

std::uint64_t BenchSpec::largest_size() const {
  return sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
}

std::string BenchSpec::encode() const {
  std::ostringstream o;
  o << bench_method_name(method) << ' ' << warmup << ' ' << min_iterations << ' ' << max_iterations
    << ' ' << number(target_rel_stdev) << ' ' << number(max_seconds) << ' ' << rounds << ' ' << seed
    << ' ' << sizes.size();
  for (auto s : sizes) o << ' ' << s;
  o << ' ' << algorithms.size();
  for (const auto& a : algorithms) o << ' ' << a;
  return o.str();
}

BenchSpec BenchSpec::decode(const std::string& text) {
  std::istringstream in(text);
  BenchSpec s;
  std::string method;
  size_t n = 0;
  in >> method >> s.warmup >> s.min_iterations >> s.max_iterations >> s.target_rel_stdev >>
      s.max_seconds >> s.rounds >> s.seed >> n;
  if (!in) throw std::runtime_error("bench specification is malformed: \"" + text + "\"");
  s.method = parse_bench_method(method);
  s.sizes.resize(n);
  for (auto& x : s.sizes) in >> x;
  in >> n;
  s.algorithms.resize(n);
  for (auto& a : s.algorithms) in >> a;
  if (!in) throw std::runtime_error("bench specification is malformed: \"" + text + "\"");
  return s;
}

namespace {
// The non-root ranks' latencies.
std::vector<double> others(const BenchPoint& p) {
  std::vector<double> v;
  for (size_t r = 0; r < p.rank_us.size(); ++r)
    if (static_cast<int>(r) != p.root) v.push_back(p.rank_us[r]);
  return v;
}
}  // namespace

double BenchPoint::avg_us() const {
  return mean(others(*this));
}

double BenchPoint::min_us() const {
  const auto v = others(*this);
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

double BenchPoint::max_us() const {
  const auto v = others(*this);
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

std::string BenchPoint::encode() const {
  std::ostringstream o;
  o << algorithm << ' ' << used << ' ' << bytes << ' ' << root << ' ' << iterations << ' '
    << number(rel_stdev) << ' ' << bench_stop_name(stop) << ' ' << number(rtt_us) << ' '
    << (verified ? 1 : 0) << ' ' << rank_us.size();
  for (double v : rank_us) o << ' ' << number(v);
  return o.str();
}

BenchPoint BenchPoint::decode(const std::string& text) {
  std::istringstream in(text);
  BenchPoint p;
  std::string stop;
  int verified = 0;
  size_t n = 0;
  in >> p.algorithm >> p.used >> p.bytes >> p.root >> p.iterations >> p.rel_stdev >> stop >>
      p.rtt_us >> verified >> n;
  if (!in || n > (1u << 20))
    throw std::runtime_error("bench result is malformed: \"" + text + "\"");
  p.verified = verified == 1;
  p.stop = stop == "cap" ? BenchStop::kCap : stop == "time" ? BenchStop::kTime : BenchStop::kStdev;
  p.rank_us.resize(n);
  for (auto& v : p.rank_us) in >> v;
  if (!in) throw std::runtime_error("bench result is malformed: \"" + text + "\"");
  return p;
}

void run_bench(runtime::Communicator& comm, const BenchSpec& spec, int root, std::byte* buffer,
               const std::function<void(const BenchPoint&)>& on_point,
               const std::function<void()>& on_alive) {
  if (root < 0 || root >= comm.size())
    throw std::invalid_argument("bench: root " + std::to_string(root) + " is outside 0.." +
                                std::to_string(comm.size() - 1));
  if (comm.rank() == root) runtime::fill_pattern(buffer, spec.largest_size(), spec.seed);
  PointRunner runner(comm, spec, root, buffer, on_alive);
  for (const auto& algorithm : spec.algorithms)
    for (std::uint64_t size : spec.sizes) {
      BenchPoint p = runner.run(algorithm, size);
      if (comm.rank() == root && on_point) on_point(p);
    }
}

}  // namespace gridbcast::job
