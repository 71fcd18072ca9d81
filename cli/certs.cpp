// gridbcast certs: the grid CA and per-node certificates for WAN links marked tls: true.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "lanes/certs.hpp"
#include "lanes/tls.hpp"

namespace gridbcast::cli {

namespace {

struct Certs {
  CLI::App* certs_cmd = nullptr;
  CLI::App* certs_init = nullptr;
  std::string ci_dir, ci_name = "gridbcast grid CA";
  int ci_days = 3650;
  bool ci_force = false;
  CLI::App* certs_issue = nullptr;
  std::string cs_topology, cs_dir;
  std::vector<std::string> cs_nodes;
  int cs_days = 365;
  bool cs_force = false;

  explicit Certs(CLI::App& app) {
    certs_cmd = app.add_subcommand(
        "certs", "Create the grid CA and per-node certificates for WAN links marked tls: true");
    certs_cmd->require_subcommand(1);
    certs_cmd->footer(
        "Examples:\n  gridbcast certs init /etc/gridbcast/certs\n"
        "  gridbcast certs issue site-configs/two-sites-tls.yaml --dir /etc/gridbcast/certs\n"
        "  gridbcast launch site-configs/two-sites-tls.yaml --cert-dir /etc/gridbcast/certs\n"
        "Copy ca.crt and each node's NODE.crt and NODE.key to that node; ca.key stays with whoever "
        "issues.");
    certs_init = certs_cmd->add_subcommand(
        "init",
        "Create a grid CA: DIR/ca.key (mode 0600) and the self-signed DIR/ca.crt (EC P-256)");
    certs_init->add_option("DIR", ci_dir, "directory to create or fill")->required();
    certs_init->add_option("--name", ci_name, "the CA's subject CN")->capture_default_str();
    certs_init->add_option("--days", ci_days, "validity in days")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    certs_init->add_flag("--force", ci_force,
                         "replace an existing CA (certificates it issued stop working)");
    certs_init->footer("Example:\n  gridbcast certs init /etc/gridbcast/certs");
    certs_issue =
        certs_cmd->add_subcommand("issue",
                                  "Issue DIR/NODE.key (mode 0600) and DIR/NODE.crt, signed by the "
                                  "grid CA, for every node of a topology");
    certs_issue
        ->add_option("TOPOLOGY", cs_topology, "site-config YAML whose nodes get certificates")
        ->required();
    certs_issue->add_option("--dir", cs_dir, "the CA's directory (from 'gridbcast certs init')")
        ->required();
    certs_issue->add_option("--node", cs_nodes,
                            "only these nodes (repeatable; default: every node)");
    certs_issue->add_option("--days", cs_days, "validity in days")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    certs_issue->add_flag("--force", cs_force, "replace existing certificates and keys");
    certs_issue->footer(
        "Example:\n  gridbcast certs issue site-configs/two-sites-tls.yaml --dir "
        "/etc/gridbcast/certs\n"
        "Each certificate names its node in the subject CN and as a DNS subject alternative name;\n"
        "a rank accepts a peer only if the certificate names the node of the rank the peer "
        "claims.");
  }

  int run() {
    if (*certs_init) {
      lanes::CertOptions o;
      o.not_after = std::chrono::hours(24) * ci_days;
      o.overwrite = ci_force;
      lanes::create_grid_ca(ci_dir, ci_name, o);
      std::cout << "gridbcast certs: created "
                << (std::filesystem::path(ci_dir) / lanes::kCaCertFile).string() << " and "
                << (std::filesystem::path(ci_dir) / lanes::kCaKeyFile).string() << " (0600)\n";
      return 0;
    }
    const Loaded l = load(cs_topology);
    std::vector<std::string> nodes = cs_nodes;
    if (nodes.empty())
      for (const auto& n : l.grid.nodes) nodes.push_back(n.name);
    for (const auto& name : nodes) {
      bool known = false;
      for (const auto& n : l.grid.nodes) known = known || n.name == name;
      if (!known)
        throw CLI::ValidationError("--node", "\"" + name + "\" is not a node of " + cs_topology);
    }
    lanes::CertOptions o;
    o.not_after = std::chrono::hours(24) * cs_days;
    o.overwrite = cs_force;
    for (const auto& name : nodes) {
      lanes::issue_node_cert(cs_dir, name, o);
      std::cout << "gridbcast certs: issued " << lanes::node_cert_path(cs_dir, name).string()
                << " and " << lanes::node_key_path(cs_dir, name).string() << " (0600)\n";
    }
    return 0;
  }
};

}  // namespace

Command register_certs(CLI::App& app) {
  auto c = std::make_shared<Certs>(app);
  return {c->certs_cmd, [c] { return c->run(); }};
}

}  // namespace gridbcast::cli
