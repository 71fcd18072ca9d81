// The grid CA and per-node certificates for TLS links (`gridbcast certs`),
// built with OpenSSL's C API: EC P-256 keys, X.509 v3 certificates signed with
// SHA-256. No OpenSSL types here.
//
//   DIR/ca.key  (0600)   DIR/ca.crt          made by create_grid_ca
//   DIR/NODE.key (0600)  DIR/NODE.crt        made by issue_node_cert, signed by ca.key;
//                                            subject CN = NODE, SAN DNS:NODE,
//                                            usable as TLS client and server
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

namespace gridbcast::lanes {

struct CertOptions {
  // Validity relative to now; tests issue certificates that expired long ago.
  std::chrono::seconds not_before{-3600};
  std::chrono::seconds not_after{std::chrono::hours(24 * 365)};
  // Replace existing files instead of refusing. New files are written beside
  // the old ones and renamed over them; the old files are never opened for
  // writing, so a descriptor already open on an old key never sees the new one.
  bool overwrite = false;
};

// Creates DIR (mode 0700 if new) with a CA key and self-signed certificate.
// Throws std::runtime_error naming the file on any failure, or when a CA is
// there already and !overwrite.
void create_grid_ca(const std::filesystem::path& dir, const std::string& ca_name,
                    const CertOptions& options = {std::chrono::seconds{-3600},
                                                  std::chrono::hours(24 * 365 * 10), false});

// Issues DIR/NODE.key and DIR/NODE.crt signed by DIR/ca.key. Throws naming the
// missing CA file and how to create it.
void issue_node_cert(const std::filesystem::path& dir, const std::string& node,
                     const CertOptions& options = {});

// Empty when `node` can name a certificate and its files: 1 to 253 of
// [A-Za-z0-9._-], not starting with '.' or '-'. Otherwise why not. Names with
// ',' or ':' could inject subject alternative names; '/' would leave DIR.
std::string node_name_problem(const std::string& node);

// Throws std::runtime_error naming `path` when a private key file is readable
// or writable by group or others, or owned by another user than this process's
// (root excepted), as ssh refuses such keys.
void check_key_file(const std::filesystem::path& path);

}  // namespace gridbcast::lanes
