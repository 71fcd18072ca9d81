// Broadcasts across a tls: true WAN link over real loopback sockets, ranks as
// threads: byte-exact everywhere; bad certificates and plaintext peers are
// rejected with the peer and the reason named, and do not disturb the job.
#include <gtest/gtest.h>

#include <asio/ssl.hpp>
#include <cstring>
#include <optional>
#include <thread>

#include "lanes/certs.hpp"
#include "lanes/net.hpp"
#include "lanes/tls.hpp"
#include "runtime/buffer.hpp"
#include "runtime/run_until.hpp"
#include "support/grids.hpp"
#include "support/ranks.hpp"
#include "support/temp_dir.hpp"
#include "topology/plan/plan.hpp"

namespace gridbcast::runtime {
namespace {

using namespace std::chrono_literals;
using testing::bcast_and_check;
using testing::Ranks;
using testing::TempDir;

// Two sites of two nodes (s0n0 s0n1 | s1n0 s1n1), the WAN link tls: true.
topology::Grid tls_grid(int streams = 3) {
  auto g = testing::make_grid({2, 2}, streams);
  g.wan[0].tls = true;
  return g;
}

void issue_all(const std::filesystem::path& dir, const topology::Grid& g,
               const std::string& ca = "test grid CA") {
  lanes::create_grid_ca(dir, ca);
  for (const auto& n : g.nodes) lanes::issue_node_cert(dir, n.name);
}

CommOptions with_certs(const std::filesystem::path& dir) {
  CommOptions o;
  o.cert_dir = dir.string();
  o.timeout = 20s;
  return o;
}

TEST(TlsBroadcast, EveryAlgorithmIsByteExactAcrossATlsWanLink) {
  const auto grid = tls_grid();
  TempDir certs;
  issue_all(certs.path(), grid);
  Ranks ranks(grid, with_certs(certs.path()));
  const std::uint64_t sizes[] = {0, 1, 4097, (3u << 20) + 5};
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf((3u << 20) + 5);
    std::uint64_t seed = 1;
    for (const auto& info : topology::algorithms())
      for (int root : {0, 3})
        for (std::uint64_t size : sizes) bcast_and_check(c, buf, size, root, info.id, seed++);
  });
  for (int r = 0; r < ranks.size(); ++r) EXPECT_EQ(ranks.at(r).rejected_connections(), 0u);
}

TEST(TlsBroadcast, PointToPointMessagesCrossTheTlsLink) {
  const auto grid = tls_grid();
  TempDir certs;
  issue_all(certs.path(), grid);
  Ranks ranks(grid, with_certs(certs.path()));
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> msg(1'000'003);
    if (c.rank() == 0) {
      fill_pattern(msg.data(), msg.size(), 99);
      c.send(3, 1, 5, msg.data(), msg.size());
    } else if (c.rank() == 3) {
      const auto got = c.receive(0, 1, 5, msg.data(), msg.size());
      std::vector<std::byte> want(msg.size());
      fill_pattern(want.data(), want.size(), 99);
      EXPECT_EQ(got.bytes, msg.size());
      EXPECT_EQ(std::memcmp(msg.data(), want.data(), msg.size()), 0);
    }
  });
}

TEST(TlsBroadcast, MissingCertificatesFailTheRankNamingTheFileAndTheCommand) {
  const auto grid = tls_grid();
  TempDir certs;
  lanes::create_grid_ca(certs.path(), "test grid CA");
  try {
    Communicator c(grid, 2, new_credentials(), with_certs(certs.path()));
    FAIL() << "started without its certificate";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find((certs / "s1n0.crt").string()), std::string::npos) << m;
    EXPECT_NE(m.find("gridbcast certs issue"), std::string::npos) << m;
  }
  // No directory at all (and none in the environment).
  ::unsetenv(lanes::kCertDirEnv);
  try {
    Communicator c(grid, 2, new_credentials(), CommOptions{});
    FAIL() << "started without a certificate directory";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("GRIDBCAST_CERT_DIR"), std::string::npos) << m;
    EXPECT_NE(m.find("gridbcast certs init"), std::string::npos) << m;
  }
  // A rank with no tls: true link needs no certificates.
  auto plain = tls_grid();
  plain.wan[0].tls = false;
  EXPECT_NO_THROW(Communicator(plain, 2, new_credentials(), CommOptions{}));
}

TEST(TlsBroadcast, ARankWithAnotherCasCertificateFailsTheBroadcastNamingThePeer) {
  const auto grid = tls_grid(1);
  TempDir good, rogue;
  issue_all(good.path(), grid);
  issue_all(rogue.path(), grid, "rogue CA");
  Ranks ranks(grid, [&](int r) {
    auto o = with_certs(r == 2 ? rogue.path() : good.path());
    o.timeout = 3s;
    return o;
  });
  std::string root_error;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_ANY_THROW(ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(1 << 20);
    try {
      c.bcast(buf.data(), buf.size(), 0, topology::Algorithm::kBinomial);
    } catch (const std::exception& e) {
      if (c.rank() == 0) root_error = e.what();
      throw;
    }
  }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  // Binomial from rank 0 over 4 ranks sends to rank 2 across the WAN.
  EXPECT_NE(root_error.find("rank 2 (s1n0, "), std::string::npos) << root_error;
  EXPECT_NE(root_error.find("lane"), std::string::npos) << root_error;
  EXPECT_NE(root_error.find("unknown CA"), std::string::npos) << root_error;
}

// Connects to `target` as rank `claim` (lane 0, stream 0) with the job's secret,
// over TLS with `node`'s certificate from `dir` (plain TCP when dir is empty).
void impostor(const asio::ip::tcp::endpoint& target, const JobCredentials& real, int claim,
              const std::filesystem::path& dir, const std::string& node,
              const std::string& server_node) {
  asio::io_context io;
  lanes::Hello hello;
  hello.rank = static_cast<std::uint32_t>(claim);
  hello.to_rank = 2;  // every target here is rank 2
  hello.stream = 7;   // a stream no plan uses, so a wrong acceptance could not pass unseen
  const lanes::Credentials creds{real.job_id, real.secret};
  std::shared_ptr<lanes::TlsContext> ctx =
      dir.empty() ? nullptr : lanes::TlsContext::load(dir, node);
  lanes::TlsPeer peer{ctx.get(), server_node};
  EXPECT_THROW(run_until(io,
                         [&]() -> asio::awaitable<int> {
                           co_await lanes::connect_authenticated("", target, hello, creds,
                                                                 lanes::Clock::now() + 5s, "rank 2",
                                                                 ctx ? &peer : nullptr);
                           co_return 0;
                         }()),
               lanes::NetworkError)
      << "claiming rank " << claim << " with " << (dir.empty() ? "no TLS" : node);
}

TEST(TlsBroadcast, ImpostorsAreRejectedAndTheBroadcastsComplete) {
  const auto grid = tls_grid();
  TempDir good, rogue;
  issue_all(good.path(), grid);
  issue_all(rogue.path(), grid, "rogue CA");
  // rogue's s0n0 certificate next to the grid CA: signed by the wrong CA.
  TempDir mixed;
  std::filesystem::copy_file(good / lanes::kCaCertFile, mixed / lanes::kCaCertFile);
  std::filesystem::copy_file(rogue / "s0n0.crt", mixed / "s0n0.crt");
  std::filesystem::copy_file(rogue / "s0n0.key", mixed / "s0n0.key");
  Ranks ranks(grid, with_certs(good.path()));
  const auto target = lanes::make_endpoint(grid.nodes[2].lane_nic(0).address, ranks.port(2, 0));
  std::thread attacker([&] {
    impostor(target, ranks.credentials(), 0, {}, "", "s1n0");  // plaintext on a TLS link
    impostor(target, ranks.credentials(), 0, mixed.path(), "s0n0", "s1n0");  // wrong CA
    impostor(target, ranks.credentials(), 0, good.path(), "s0n1", "s1n0");  // s0n1's cert as rank 0
  });
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(2 << 20);
    for (std::uint64_t i = 0; i < 20; ++i)
      bcast_and_check(c, buf, buf.size(), static_cast<int>(i % 4), topology::Algorithm::kMultilane,
                      i);
  });
  attacker.join();
  ranks.run([&](Communicator& c) {
    std::vector<std::byte> buf(1024);
    for (int i = 0; i < 5; ++i) c.bcast(buf.data(), buf.size(), 0);
  });
  EXPECT_GE(ranks.at(2).rejected_connections(), 3u);
}

}  // namespace
}  // namespace gridbcast::runtime
