// TLS for WAN links marked `tls: true` (docs/SECURITY.md): the grid CA and this
// node's certificate and key, loaded once per rank. No Asio or OpenSSL here:
// the SSL context lives in lanes/tls_impl.hpp, which only lanes' sources include.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

namespace gridbcast::lanes {

// The files of a certificate directory (`gridbcast certs init DIR`,
// `gridbcast certs issue TOPOLOGY --dir DIR`).
inline constexpr const char* kCaCertFile = "ca.crt";
inline constexpr const char* kCaKeyFile = "ca.key";
std::filesystem::path node_cert_path(const std::filesystem::path& dir, const std::string& node);
std::filesystem::path node_key_path(const std::filesystem::path& dir, const std::string& node);

// TLS 1.3 only, both sides present a certificate from the grid CA, and the
// peer's certificate must name the node it is expected to be (checked after
// the handshake by Stream::check_peer_name, since a server learns which rank a
// client claims only from its hello).
class TlsContext {
 public:
  // Loads DIR/ca.crt, DIR/NODE.crt and DIR/NODE.key. Throws NetworkError naming
  // a missing or unreadable file and the command that creates it.
  static std::shared_ptr<TlsContext> load(const std::filesystem::path& dir,
                                          const std::string& node);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  const std::string& node() const { return node_; }
  const std::filesystem::path& dir() const { return dir_; }

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  TlsContext() = default;
  std::filesystem::path dir_;
  std::string node_;
  std::unique_ptr<Impl> impl_;
};

// Where ranks look for certificates when the launcher names none: this
// environment variable.
inline constexpr const char* kCertDirEnv = "GRIDBCAST_CERT_DIR";

}  // namespace gridbcast::lanes
