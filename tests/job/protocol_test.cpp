// job/protocol: every message round-trips, and a decoder refuses what is out
// of range before anything is used; a sealed frame cannot be altered,
// replayed, reordered or moved to another rank's connection.
#include "job/protocol.hpp"

#include <gtest/gtest.h>

#include <functional>

namespace gridbcast::job::control {
namespace {

const std::vector<std::uint8_t> kSecret(32, 7);
constexpr runtime::RunNonce kNonce{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};

TEST(ControlProtocol, EveryMessageRoundTrips) {
  JobParams p;
  p.kind = JobKind::kBench;
  p.algorithm = "multilane";
  p.root = 3;
  p.size = (std::uint64_t{1} << 40) + 5;
  p.iterations = 7;
  p.random_roots = true;
  p.seed = 99;
  p.timeout_ms = 1234;
  p.files = {"/data/in.bin", "/data/more"};
  p.file_count = 12;
  p.output = "/tmp/{node}/x";
  p.file_mode = 0640;
  p.file_mtime_ns = -5;
  p.source_dev = 8;
  p.source_ino = 1ull << 60;
  p.window_bytes = 64 << 20;
  p.resume = true;
  p.verify = false;
  p.bench = "spec";
  p.cert_dir = "/certs";
  p.rank_labels = {0, 2, 5, 7};
  p.probe.lan_seconds = 0.25;
  p.probe.wan_seconds = 1.5;
  p.probe.latency_seconds = 0.125;
  p.probe.pings = 9;
  p.probe.wan_pairs = 3;
  const auto back = std::get<Config>(decode_to_rank(encode_body(Config{"t.yaml", "yaml", p})));
  EXPECT_EQ(back.topology_name, "t.yaml");
  EXPECT_EQ(back.topology_yaml, "yaml");
  EXPECT_EQ(back.params.kind, JobKind::kBench);
  EXPECT_EQ(back.params.size, p.size);
  EXPECT_EQ(back.params.root, 3);
  EXPECT_EQ(back.params.iterations, 7);
  EXPECT_TRUE(back.params.random_roots);
  EXPECT_EQ(back.params.files, p.files);
  EXPECT_EQ(back.params.file_count, 12u);
  EXPECT_EQ(back.params.file_mode, 0640u);
  EXPECT_EQ(back.params.file_mtime_ns, -5);
  EXPECT_EQ(back.params.source_ino, 1ull << 60);
  EXPECT_TRUE(back.params.resume);
  EXPECT_FALSE(back.params.verify);
  EXPECT_EQ(back.params.cert_dir, "/certs");
  EXPECT_EQ(back.params.rank_labels, p.rank_labels);
  EXPECT_EQ(back.params.label(2), 5);
  EXPECT_EQ(back.params.probe.lan_seconds, 0.25);
  EXPECT_EQ(back.params.probe.wan_seconds, 1.5);
  EXPECT_EQ(back.params.probe.latency_seconds, 0.125);
  EXPECT_EQ(back.params.probe.pings, 9);
  EXPECT_EQ(back.params.probe.wan_pairs, 3);
  EXPECT_FALSE(back.params.source_is_copy);
  // A root that sends its own copy (a lost root healed): one file, else refused.
  JobParams copy;
  copy.files = {"/data/in.bin"};
  copy.source_is_copy = true;
  EXPECT_TRUE(
      std::get<Config>(decode_to_rank(encode_body(Config{"t", "y", copy}))).params.source_is_copy);
  copy.files.push_back("/data/more");
  try {
    (void)decode_to_rank(encode_body(Config{"t", "y", copy}));
    ADD_FAILURE() << "a root sending its copy with two files was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("sending its own copy, with 2 files"), std::string::npos)
        << e.what();
  }
  JobParams probe;
  probe.kind = JobKind::kProbe;
  EXPECT_EQ(std::get<Config>(decode_to_rank(encode_body(Config{"t", "y", probe}))).params.kind,
            JobKind::kProbe);

  Table t;
  t.run_nonce = kNonce;
  t.ports = {{1000, 1001}, {2000, 2001}};
  const auto tt = std::get<Table>(decode_to_rank(encode_body(t), 2));
  EXPECT_EQ(tt.ports, t.ports);
  EXPECT_EQ(tt.run_nonce, kNonce);
  EXPECT_EQ(std::get<Go>(decode_to_rank(encode_body(Go{5}))).iteration, 5);
  EXPECT_TRUE(std::holds_alternative<Exit>(decode_to_rank(encode_body(Exit{}))));
  ProbePhaseSpec spec;
  spec.index = 9;
  spec.phase.name = "confirm 1";
  spec.phase.seconds = 0.4;
  spec.phase.flows.push_back({topology::ProbeKind::kRate, 3, 1, 2, 2, 1, 56, -1});
  spec.phase.flows.push_back({topology::ProbeKind::kLatency, 1, 3, 0, 0, 1, 63, 0});
  const auto sb = std::get<ProbePhaseSpec>(decode_to_rank(encode_body(spec), 4));
  EXPECT_EQ(sb.index, 9);
  EXPECT_EQ(sb.phase.name, "confirm 1");
  EXPECT_DOUBLE_EQ(sb.phase.seconds, 0.4);
  EXPECT_EQ(sb.phase.flows, spec.phase.flows);

  Done d;
  d.iteration = 2;
  d.t0_ns = 10;
  d.t1_ns = 20;
  d.sha256 = std::string(64, 'a');
  d.algorithm = "binomial";
  d.peak_rss = 1ull << 33;
  d.path = "/tmp/x";
  const auto dd = std::get<Done>(decode_to_launcher(encode_body(d)));
  EXPECT_EQ(dd.sha256, d.sha256);
  EXPECT_EQ(dd.path, "/tmp/x");
  EXPECT_EQ(dd.peak_rss, d.peak_rss);
  const auto pp = std::get<Progress>(decode_to_launcher(encode_body(Progress{1, 2, 3, 4, {}})));
  EXPECT_EQ(pp.bytes_in, 2u);
  EXPECT_EQ(pp.bytes_out, 3u);
  EXPECT_EQ(pp.bytes_worked, 4u);
  EXPECT_TRUE(pp.links.empty());
  const auto pl = std::get<Progress>(decode_to_launcher(encode_body(Progress{
      1,
      2,
      3,
      4,
      {{7, 1, 0, 3, 1ull << 40, 65536, 999, 1u << 20}, {1048575, 7, 7, 64, 0, 0, 0, 0, true}}})));
  ASSERT_EQ(pl.links.size(), 2u);
  EXPECT_EQ(pl.links[0].peer, 7);
  EXPECT_EQ(pl.links[0].lane_from, 1);
  EXPECT_EQ(pl.links[0].lane_to, 0);
  EXPECT_EQ(pl.links[0].bytes_acked, 1ull << 40);
  EXPECT_EQ(pl.links[0].notsent_bytes, 65536u);
  EXPECT_EQ(pl.links[0].streams, 3);
  EXPECT_EQ(pl.links[0].rwnd_limited_us, 999u);
  EXPECT_EQ(pl.links[1].peer, 1048575);
  EXPECT_FALSE(pl.links[0].connecting);
  EXPECT_TRUE(pl.links[1].connecting);
  EXPECT_EQ(pl.links[0].unacked_bytes, 1u << 20);
  EXPECT_EQ(std::get<Abort>(decode_to_launcher(encode_body(Abort{-3, "why"}))).code, -3);
  const auto aa = std::get<Alive>(decode_to_launcher(
      encode_body(Alive{"waiting for a message from rank 1 (a2, 127.0.1.2 lane 0)", 77})));
  EXPECT_EQ(aa.waiting, "waiting for a message from rank 1 (a2, 127.0.1.2 lane 0)");
  EXPECT_EQ(aa.moved, 77u);
  // A heartbeat's waiting text is bounded: the encoder cuts it, the decoder refuses more.
  EXPECT_EQ(std::get<Alive>(decode_to_launcher(encode_body(Alive{std::string(5000, 'w'), 0})))
                .waiting.size(),
            kMaxWaitingText);
  std::string long_alive = encode_body(Alive{std::string(kMaxWaitingText, 'w'), 0});
  long_alive.insert(5, "w");  // one byte more than the length says, then fix the length
  long_alive[4] = static_cast<char>(long_alive[4] + 1);
  EXPECT_THROW(decode_to_launcher(long_alive), ProtocolError);
  EXPECT_EQ(std::get<Endpoints>(decode_to_launcher(encode_body(Endpoints{{5, 6}}))).ports[1], 6);
  FileList fl;
  fl.iteration = 1;
  fl.files.push_back({"dir/a.bin", 5, 1, 1, std::string(64, 'b')});
  fl.files.push_back({"dir/b.bin", 1ull << 40, 1ull << 18, 7, std::string(64, 'c'), 12345, true});
  const auto fb = std::get<FileList>(decode_to_launcher(encode_body(fl)));
  ASSERT_EQ(fb.files.size(), 2u);
  EXPECT_EQ(fb.files[1].path, "dir/b.bin");
  EXPECT_EQ(fb.files[1].bytes, 1ull << 40);
  EXPECT_EQ(fb.files[1].chunks_sent, 7u);
  EXPECT_EQ(fb.files[0].root_digest, std::string(64, 'b'));
  EXPECT_EQ(fb.files[1].wire_bytes, 12345u);
  EXPECT_TRUE(fb.files[1].compressed);
  EXPECT_FALSE(fb.files[0].compressed);
  ProbeReport pr;
  pr.phase = 3;
  pr.samples.push_back({2, 1ull << 33, 0.25, 0, 0, 0});
  pr.samples.push_back({5, 0, 0, 20e-6, 31e-6, 12});
  const auto pb = std::get<ProbeReport>(decode_to_launcher(encode_body(pr)));
  EXPECT_EQ(pb.phase, 3);
  ASSERT_EQ(pb.samples.size(), 2u);
  EXPECT_EQ(pb.samples[0].flow, 2);
  EXPECT_EQ(pb.samples[0].bytes, 1ull << 33);
  EXPECT_DOUBLE_EQ(pb.samples[0].seconds, 0.25);
  EXPECT_DOUBLE_EQ(pb.samples[1].rtt_min_s, 20e-6);
  EXPECT_DOUBLE_EQ(pb.samples[1].rtt_median_s, 31e-6);
  EXPECT_EQ(pb.samples[1].pings, 12);
  for (const ToLauncher& m : std::vector<ToLauncher>{Alive{}, Finished{}, Ready{4}, Point{"p"},
                                                     BenchDone{1, 2}, Error{"e"}})
    EXPECT_EQ(name_of(decode_to_launcher(encode_body(m))), name_of(m));
}

TEST(ControlProtocol, DecodersRefuseWhatIsOutOfRange) {
  const auto refused_by_rank = [](const std::string& body, std::uint32_t ranks = 0) {
    EXPECT_THROW(decode_to_rank(body, ranks), ProtocolError)
        << "accepted a body of " << body.size() << " bytes";
  };
  const auto refused_by_launcher = [](const std::string& body) {
    EXPECT_THROW(decode_to_launcher(body), ProtocolError);
  };
  refused_by_rank("");
  refused_by_rank(std::string(1, '\x63'));           // an unknown type
  refused_by_rank(encode_body(Go{1}) + "x");         // trailing bytes
  refused_by_rank(encode_body(Go{1}).substr(0, 3));  // truncated
  std::string negative = encode_body(Go{1});
  negative[1] = '\xff';  // iteration -16777215
  refused_by_rank(negative);
  Table t;
  t.run_nonce = kNonce;
  t.ports = {{1000, 1001}, {2000, 2001}};
  refused_by_rank(encode_body(t), 3);  // a table for another job size
  Table zero;
  zero.run_nonce = kNonce;
  zero.ports = {{0, 1000}};  // lane 0 without a port
  refused_by_rank(encode_body(zero));
  Table gap;
  gap.run_nonce = kNonce;
  gap.ports = {{1000, 0, 1002}};  // a port after a lane without one
  refused_by_rank(encode_body(gap));
  Table four;
  four.run_nonce = kNonce;
  four.ports = {{1000, 1001, 1002, 1003}};  // four lanes: well formed
  EXPECT_EQ(std::get<Table>(decode_to_rank(encode_body(four), 1)).ports, four.ports);
  // A rank count of 2^31, as the launcher's old signed check let through
  // (the count follows the type byte and the 16-byte nonce).
  std::string huge = encode_body(t);
  huge[1 + runtime::kRunNonceBytes] = '\x80';
  refused_by_rank(huge);
  // The run nonce: all zero is one nobody drew; cut short, the table is truncated.
  Table undrawn = t;
  undrawn.run_nonce = {};
  refused_by_rank(encode_body(undrawn));
  refused_by_rank(encode_body(t).substr(0, 1 + runtime::kRunNonceBytes - 1));
  // The table before it carried a nonce (type 2) is no message any more.
  std::string old_table = encode_body(t).substr(1 + runtime::kRunNonceBytes);
  old_table.insert(0, 1, '\x02');
  refused_by_rank(old_table);
  // A text field that claims more than the message holds.
  std::string text = encode_body(Error{"abc"});
  text[1] = '\x7f';
  refused_by_launcher(text);
  Done backwards;
  backwards.t0_ns = 5;
  backwards.t1_ns = 4;
  refused_by_launcher(encode_body(backwards));
  Done bad_digest;
  bad_digest.sha256 = "not hex";
  refused_by_launcher(encode_body(bad_digest));
  refused_by_launcher(std::string(1, '\x01'));  // a Config sent to the launcher
  // File lists: more records than one list may hold, more chunks sent than
  // the file has, a digest that is not one, an empty or over-long path, wire
  // bytes beyond any file's windows.
  FileList many;
  many.files.assign(kMaxFileRecordsPerList + 1, {"a", 1, 1, 1, std::string(64, 'a')});
  refused_by_launcher(encode_body(many));
  for (const FileRecord& bad :
       {FileRecord{"a", 1, 1, 2, std::string(64, 'a')}, FileRecord{"a", 1, 1, 1, "zz"},
        FileRecord{"", 1, 1, 1, std::string(64, 'a')},
        FileRecord{std::string(kMaxPathBytes + 1, 'p'), 1, 1, 1, std::string(64, 'a')},
        FileRecord{"a", 1, 1, 1, std::string(64, 'a'), kMaxWireBytes + 1}}) {
    FileList one;
    one.files.push_back(bad);
    refused_by_launcher(encode_body(one));
  }
  std::string claims = encode_body(FileList{});
  claims[5] = '\x7f';  // a record count of 2^31-ish in an empty message
  refused_by_launcher(claims);
  JobParams p;
  p.files = {""};
  refused_by_rank(encode_body(Config{"t", "y", p}));
  p.files.clear();
  p.iterations = 0;
  refused_by_rank(encode_body(Config{"t", "y", p}));
  p.iterations = 1;
  p.root = -1;
  refused_by_rank(encode_body(Config{"t", "y", p}));
  // A rank label outside the rank range, and a label count past the limit
  // (claimed in a message that cannot hold them).
  p.root = 0;
  p.rank_labels = {0, -4};
  refused_by_rank(encode_body(Config{"t", "y", p}));
  p.rank_labels = {0, 1};
  std::string labels = encode_body(Config{"t", "y", p});
  // The count, then two i32 labels, then the probe settings (3 x u64, 2 x i32).
  const size_t count_at = labels.size() - 12 - 32;
  labels[count_at] = '\x7f';
  refused_by_rank(labels);
  // Probe settings past what a schedule accepts: pings, pairs, phase lengths.
  p.rank_labels.clear();
  for (const auto& bad : std::vector<std::function<void(JobParams&)>>{
           [](JobParams& q) { q.probe.pings = 1; }, [](JobParams& q) { q.probe.pings = 10001; },
           [](JobParams& q) { q.probe.wan_pairs = 0; },
           [](JobParams& q) { q.probe.wan_pairs = 65; },
           [](JobParams& q) { q.probe.lan_seconds = 601; }}) {
    JobParams q = p;
    bad(q);
    refused_by_rank(encode_body(Config{"t", "y", q}));
  }
  // Probe phases from the launcher: flows outside the job, to itself, past
  // the lanes or the streams a link has, an unknown kind, too many flows.
  const auto spec_with = [](topology::ProbeFlow f) {
    ProbePhaseSpec s;
    s.index = 5;
    s.phase.name = "confirm";
    s.phase.seconds = 0.3;
    s.phase.flows.push_back(f);
    return encode_body(s);
  };
  const topology::ProbeFlow fine{topology::ProbeKind::kRate, 0, 1, 0, 0, 1, 60, -1};
  EXPECT_NO_THROW(decode_to_rank(spec_with(fine), 4));
  std::vector<topology::ProbeFlow> bad_flows(6, fine);
  bad_flows[0].to = 4;  // a job of 4 ranks
  bad_flows[1].to = bad_flows[1].from;
  bad_flows[2].nic_to = 8;  // past the 8 lanes
  bad_flows[3].stream = 63;
  bad_flows[3].streams = 2;
  bad_flows[4].streams = 0;
  bad_flows[5].from = -1;
  for (const auto& f : bad_flows) refused_by_rank(spec_with(f), 4);
  std::string unknown_kind = spec_with(fine);
  unknown_kind[unknown_kind.size() - 17] = '\x07';  // the one flow's kind byte (of 17)
  refused_by_rank(unknown_kind, 4);
  ProbePhaseSpec no_flows;
  no_flows.phase.name = "x";
  no_flows.phase.seconds = 1;
  std::string many_flows = encode_body(no_flows);
  many_flows[many_flows.size() - 4] = '\x7f';  // a flow count of 2^31-ish, no flows
  refused_by_rank(many_flows, 4);
  // The Config before probe settings (type 1) is no message any more.
  std::string old_config = encode_body(Config{"t", "y", p});
  old_config[0] = '\x01';
  refused_by_rank(old_config);
  // Probe reports: too many samples claimed, a round trip whose least is above
  // its median, a window over an hour, more pings than any flow makes.
  std::string many_samples = encode_body(ProbeReport{1, {}});
  many_samples[5] = '\x7f';
  refused_by_launcher(many_samples);
  for (const topology::ProbeSample& bad :
       {topology::ProbeSample{0, 1, 0, 2e-3, 1e-3, 2}, topology::ProbeSample{0, 1, 3601, 0, 0, 0},
        topology::ProbeSample{0, 1, 1, 0, 0, 10001}, topology::ProbeSample{-1, 1, 1, 0, 0, 0},
        topology::ProbeSample{0, (1ull << 50) + 1, 1, 0, 0, 0}})
    refused_by_launcher(encode_body(ProbeReport{0, {bad}}));
  // Progress links: more than a message may carry (claimed, with none there,
  // and real), a peer past any rank or negative, a backlog no kernel holds,
  // no streams or more than a link has, a link cut short.
  std::string many_links = encode_body(Progress{0, 0, 0, 0, {}});
  many_links[many_links.size() - 4] = '\x7f';
  refused_by_launcher(many_links);
  refused_by_launcher(encode_body(
      Progress{0, 0, 0, 0, std::vector<LinkReport>(kMaxLinkReports + 1, LinkReport{})}));
  EXPECT_EQ(
      std::get<Progress>(decode_to_launcher(encode_body(Progress{
                             0, 0, 0, 0, std::vector<LinkReport>(kMaxLinkReports, LinkReport{})})))
          .links.size(),
      kMaxLinkReports);
  refused_by_launcher(encode_body(Progress{0, 0, 0, 0, {{1 << 20, 0, 0, 1, 0, 0, 0}}}));
  refused_by_launcher(encode_body(Progress{0, 0, 0, 0, {{-1, 0, 0, 1, 0, 0, 0}}}));
  refused_by_launcher(encode_body(Progress{0, 0, 0, 0, {{1, 0, 0, 1, 0, (1ull << 40) + 1, 0}}}));
  refused_by_launcher(encode_body(Progress{0, 0, 0, 0, {{1, 0, 0, 1, 0, 0, 0, (1ull << 40) + 1}}}));
  refused_by_launcher(encode_body(Progress{0, 0, 0, 0, {{1, 0, 0, 0, 0, 0, 0}}}));
  refused_by_launcher(encode_body(Progress{0, 0, 0, 0, {{1, 0, 0, 65, 0, 0, 0}}}));
  const std::string one_link = encode_body(Progress{0, 0, 0, 0, {{1, 0, 0, 1, 5, 6, 7}}});
  refused_by_launcher(one_link.substr(0, one_link.size() - 3));
  // A link's state is up (0) or connecting (1), nothing else; one being
  // connected has moved nothing.
  std::string odd_state = one_link;
  odd_state.back() = '\x02';
  refused_by_launcher(odd_state);
  refused_by_launcher(encode_body(Progress{0, 0, 0, 0, {{1, 0, 0, 1, 5, 0, 0, 0, true}}}));
}

struct Frame {
  std::string body;
  std::array<std::uint8_t, kTagBytes> tag{};
};

Frame split(const std::string& sealed) {
  Frame f;
  f.body = sealed.substr(4, sealed.size() - 4 - kTagBytes);
  std::copy(sealed.end() - kTagBytes, sealed.end(), f.tag.begin());
  return f;
}

TEST(ControlProtocol, SealedFramesCannotBeAlteredReplayedOrMoved) {
  Sealer launcher(kSecret, 42, 3), rank(kSecret, 42, 3);
  const Frame a = split(launcher.seal(Direction::kToRank, encode_body(Go{0})));
  const Frame b = split(launcher.seal(Direction::kToRank, encode_body(Go{1})));
  // Out of order: b is the second frame.
  EXPECT_THROW(rank.open(Direction::kToRank, b.body, b.tag), ProtocolError);
  rank.open(Direction::kToRank, a.body, a.tag);
  // Replayed: a again where the second frame is due.
  EXPECT_THROW(rank.open(Direction::kToRank, a.body, a.tag), ProtocolError);
  // Altered.
  Frame c = b;
  c.body[1] ^= 1;
  EXPECT_THROW(rank.open(Direction::kToRank, c.body, c.tag), ProtocolError);
  // Reflected back in the other direction.
  EXPECT_THROW(rank.open(Direction::kToLauncher, b.body, b.tag), ProtocolError);
  rank.open(Direction::kToRank, b.body, b.tag);
  // Another rank's, another job's, another secret's key.
  for (Sealer other : {Sealer(kSecret, 42, 4), Sealer(kSecret, 43, 3),
                       Sealer(std::vector<std::uint8_t>(32, 8), 42, 3)}) {
    Sealer fresh(kSecret, 42, 3);
    const Frame f = split(other.seal(Direction::kToRank, encode_body(Exit{})));
    EXPECT_THROW(fresh.open(Direction::kToRank, f.body, f.tag), ProtocolError);
  }
}

}  // namespace
}  // namespace gridbcast::job::control
