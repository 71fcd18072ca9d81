#include "testbed/state.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace gridbcast::testbed {

std::vector<std::string> State::namespaces() const {
  std::vector<std::string> out = routers;
  for (const auto& n : nodes) out.push_back(n.ns);
  return out;
}

std::string state_root() {
  if (const char* r = std::getenv("GRIDBCAST_TESTBED_STATE_ROOT"); r && *r) return r;
  return "/run/gridbcast";
}

std::string state_dir(const std::string& prefix) {
  return state_root() + "/" + prefix;
}

bool state_exists(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir + "/state.yaml", ec);
}

State load_state(const std::string& dir) {
  const std::string path = dir + "/state.yaml";
  YAML::Node y;
  try {
    y = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw TestbedError("cannot read the testbed state " + path + ": " + e.what());
  }
  try {
    State s;
    s.dir = dir;
    s.prefix = y["prefix"].as<std::string>();
    s.id = y["id"].as<std::string>("");
    s.topology_name = y["topology"].as<std::string>("");
    s.topology_source = y["source"].as<std::string>("");
    s.status = y["status"].as<std::string>("");
    s.delay_mode = y["delay"].as<std::string>("");
    s.mgmt_bridge = y["mgmt_bridge"].as<std::string>("");
    s.mgmt_gateway = y["mgmt_gateway"].as<std::string>("");
    s.mgmt_net = y["mgmt_net"].as<std::string>("");
    for (const auto& n : y["nodes"]) {
      NodeState ns;
      ns.rank = n["rank"].as<int>();
      ns.name = n["name"].as<std::string>();
      ns.ns = n["ns"].as<std::string>();
      ns.mgmt_address = n["mgmt"].as<std::string>("");
      for (const auto& a : n["addresses"]) ns.addresses.push_back(a.as<std::string>());
      s.nodes.push_back(std::move(ns));
    }
    for (const auto& r : y["routers"]) s.routers.push_back(r.as<std::string>());
    for (const auto& l : y["root_links"]) s.root_links.push_back(l.as<std::string>());
    for (const auto& d : y["delay_lines"]) {
      DelayLineProcess p;
      p.site = d["site"].as<int>();
      p.pid = d["pid"].as<pid_t>();
      p.start_time = d["start_time"].as<unsigned long long>();
      p.log = d["log"].as<std::string>("");
      s.delay_lines.push_back(p);
    }
    return s;
  } catch (const YAML::Exception& e) {
    throw TestbedError("the testbed state " + path + " is damaged (" + e.what() +
                       "); remove that directory and any namespaces named like it by hand");
  }
}

void save_state(const State& s) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "prefix" << YAML::Value << s.prefix;
  e << YAML::Key << "id" << YAML::Value << s.id;
  e << YAML::Key << "topology" << YAML::Value << s.topology_name;
  e << YAML::Key << "source" << YAML::Value << s.topology_source;
  e << YAML::Key << "status" << YAML::Value << s.status;
  e << YAML::Key << "delay" << YAML::Value << s.delay_mode;
  e << YAML::Key << "mgmt_bridge" << YAML::Value << s.mgmt_bridge;
  e << YAML::Key << "mgmt_gateway" << YAML::Value << s.mgmt_gateway;
  e << YAML::Key << "mgmt_net" << YAML::Value << s.mgmt_net;
  e << YAML::Key << "routers" << YAML::Value << YAML::BeginSeq;
  for (const auto& r : s.routers) e << r;
  e << YAML::EndSeq;
  e << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
  for (const auto& n : s.nodes) {
    e << YAML::BeginMap << YAML::Key << "rank" << YAML::Value << n.rank << YAML::Key << "name"
      << YAML::Value << n.name << YAML::Key << "ns" << YAML::Value << n.ns << YAML::Key << "mgmt"
      << YAML::Value << n.mgmt_address << YAML::Key << "addresses" << YAML::Value << YAML::Flow
      << n.addresses << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::Key << "root_links" << YAML::Value << YAML::Flow << s.root_links;
  e << YAML::Key << "delay_lines" << YAML::Value << YAML::BeginSeq;
  for (const auto& d : s.delay_lines)
    e << YAML::Flow << YAML::BeginMap << YAML::Key << "site" << YAML::Value << d.site << YAML::Key
      << "pid" << YAML::Value << d.pid << YAML::Key << "start_time" << YAML::Value << d.start_time
      << YAML::Key << "log" << YAML::Value << d.log << YAML::EndMap;
  e << YAML::EndSeq;
  e << YAML::EndMap;

  std::error_code ec;
  std::filesystem::create_directories(s.dir, ec);
  if (ec) throw TestbedError("cannot create the state directory " + s.dir + ": " + ec.message());
  const std::string path = s.dir + "/state.yaml";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "# gridbcast testbed state: written by `gridbcast testbed up`, read by "
           "down/status/run.\n"
        << e.c_str() << "\n";
    if (!out) throw TestbedError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw TestbedError("cannot rename " + tmp + " to " + path);
}

State state_from_layout(const Layout& l, const std::string& topology_source) {
  State s;
  s.dir = state_dir(l.prefix);
  s.prefix = l.prefix;
  s.id = l.id;
  s.topology_name = l.topology_name;
  s.topology_source = topology_source;
  s.status = "creating";
  s.mgmt_bridge = l.mgmt_bridge;
  s.mgmt_gateway = l.mgmt_gateway.str();
  s.mgmt_net = l.mgmt_net.str();
  for (const auto& r : l.routers) s.routers.push_back(r.ns);
  s.root_links.push_back(l.mgmt_bridge);
  for (const auto& n : l.nodes) {
    NodeState ns;
    ns.rank = n.rank;
    ns.name = n.name;
    ns.ns = n.ns;
    ns.mgmt_address = n.mgmt_address.str();
    for (const auto& nic : n.nics) ns.addresses.push_back(nic.address.str());
    s.nodes.push_back(std::move(ns));
    s.root_links.push_back(n.mgmt_peer);
  }
  return s;
}

}  // namespace gridbcast::testbed
