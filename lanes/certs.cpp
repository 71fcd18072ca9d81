#include "lanes/certs.hpp"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "lanes/tls.hpp"

namespace gridbcast::lanes {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(FILE* f) const { std::fclose(f); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;

[[noreturn]] void fail(const std::string& what) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  std::string why;
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    why = std::string(": ") + buf;
  }
  throw std::runtime_error(what + why);
}

Key new_key() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) fail("cannot generate an EC P-256 key");
  return key;
}

// Opens `path` for writing with `mode` from the start (a key is never readable
// by others, not even for a moment); refuses an existing file unless overwrite.
std::unique_ptr<FILE, Free> create_file(const std::filesystem::path& path, mode_t mode,
                                        bool overwrite) {
  const int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    if (errno == EEXIST)
      throw std::runtime_error(path.string() + " exists already (use --force to replace it)");
    throw std::runtime_error("cannot create " + path.string() + ": " + std::strerror(errno));
  }
  ::fchmod(fd, mode);  // an existing file keeps its old mode through O_TRUNC
  FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) {
    ::close(fd);
    throw std::runtime_error("cannot write " + path.string());
  }
  return std::unique_ptr<FILE, Free>(f);
}

void write_key(const std::filesystem::path& path, EVP_PKEY* key, bool overwrite) {
  auto f = create_file(path, 0600, overwrite);
  if (PEM_write_PrivateKey(f.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    fail("cannot write the key " + path.string());
  if (std::fflush(f.get()) != 0) throw std::runtime_error("cannot write " + path.string());
}

void write_cert(const std::filesystem::path& path, X509* cert, bool overwrite) {
  auto f = create_file(path, 0644, overwrite);
  if (PEM_write_X509(f.get(), cert) != 1) fail("cannot write the certificate " + path.string());
  if (std::fflush(f.get()) != 0) throw std::runtime_error("cannot write " + path.string());
}

void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Free> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    fail(std::string("cannot add the certificate extension ") + OBJ_nid2sn(nid));
}

// The subject alternative name DNS:node, built as a GENERAL_NAME (never from
// a configuration string, where "x,DNS:y" would add a second name).
void add_san(X509* cert, const std::string& node) {
  std::unique_ptr<GENERAL_NAMES, void (*)(GENERAL_NAMES*)> names(sk_GENERAL_NAME_new_null(),
                                                                 GENERAL_NAMES_free);
  GENERAL_NAME* name = GENERAL_NAME_new();
  ASN1_IA5STRING* dns = ASN1_IA5STRING_new();
  if (!names || name == nullptr || dns == nullptr ||
      ASN1_STRING_set(dns, node.data(), static_cast<int>(node.size())) != 1) {
    GENERAL_NAME_free(name);
    ASN1_IA5STRING_free(dns);
    fail("cannot build the subject alternative name of " + node);
  }
  GENERAL_NAME_set0_value(name, GEN_DNS, dns);
  if (sk_GENERAL_NAME_push(names.get(), name) == 0) {
    GENERAL_NAME_free(name);
    fail("cannot build the subject alternative name of " + node);
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1)
    fail("cannot add the subject alternative name of " + node);
}

// A certificate for `key` named `cn`, not yet signed; the issuer is set by the caller.
Cert new_cert(EVP_PKEY* key, const std::string& cn, const CertOptions& o) {
  Cert cert(X509_new());
  if (!cert) fail("cannot allocate a certificate");
  X509_set_version(cert.get(), 2);  // v3
  // A random 127-bit serial, as RFC 5280 asks for (positive, at most 20 bytes).
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) fail("no random bytes for a serial number");
  serial[0] &= 0x7f;
  std::unique_ptr<BIGNUM, Free> bn(BN_bin2bn(serial, sizeof serial, nullptr));
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())))
    fail("cannot set a serial number");
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), static_cast<long>(o.not_before.count())) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(o.not_after.count())))
    fail("cannot set the validity period");
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1)
    fail("cannot set the subject name \"" + cn + "\"");
  if (X509_set_pubkey(cert.get(), key) != 1) fail("cannot set the public key");
  return cert;
}

Key read_key(const std::filesystem::path& path) {
  check_key_file(path);
  std::unique_ptr<FILE, Free> f(std::fopen(path.c_str(), "r"));
  if (!f) throw std::runtime_error("cannot read " + path.string());
  Key key(PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr));
  if (!key) fail(path.string() + " is not a private key");
  return key;
}

Cert read_cert(const std::filesystem::path& path) {
  std::unique_ptr<FILE, Free> f(std::fopen(path.c_str(), "r"));
  if (!f) throw std::runtime_error("cannot read " + path.string());
  Cert cert(PEM_read_X509(f.get(), nullptr, nullptr, nullptr));
  if (!cert) fail(path.string() + " is not a certificate");
  return cert;
}

}  // namespace

void create_grid_ca(const std::filesystem::path& dir, const std::string& ca_name,
                    const CertOptions& options) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) throw std::runtime_error("cannot create " + dir.string() + ": " + ec.message());
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  }
  Key key = new_key();
  Cert cert = new_cert(key.get(), ca_name, options);
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1)
    fail("cannot set the issuer");
  add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
  add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash");
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) fail("cannot sign the CA certificate");
  write_key(dir / kCaKeyFile, key.get(), options.overwrite);
  write_cert(dir / kCaCertFile, cert.get(), options.overwrite);
}

std::string node_name_problem(const std::string& node) {
  if (node.empty()) return "the name is empty";
  if (node.size() > 253) return "longer than 253 characters";
  if (node.front() == '.' || node.front() == '-')
    return "it starts with '" + node.substr(0, 1) + "'";
  for (const char c : node) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x",
                    static_cast<unsigned>(static_cast<unsigned char>(c)));
      return std::string("it contains ") + hex +
             "; node names for certificates use only letters, digits, '.', '-' and '_'";
    }
  }
  return {};
}

void check_key_file(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::runtime_error("cannot read the key " + path.string() + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path.string() + " is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw std::runtime_error("refusing the key " + path.string() + ": its mode is " + mode +
                             ", so group or others may read it; run 'chmod 600 " + path.string() +
                             "' (and replace the key if others may have read it)");
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    throw std::runtime_error("refusing the key " + path.string() + ": it belongs to uid " +
                             std::to_string(st.st_uid) + ", not to this user (uid " +
                             std::to_string(::geteuid()) + ")");
}

void issue_node_cert(const std::filesystem::path& dir, const std::string& node,
                     const CertOptions& options) {
  const auto ca_key_path = dir / kCaKeyFile;
  const auto ca_cert_path = dir / kCaCertFile;
  std::error_code ec;
  for (const auto& p : {ca_key_path, ca_cert_path})
    if (!std::filesystem::exists(p, ec))
      throw std::runtime_error("no grid CA: " + p.string() +
                               " does not exist; create it with 'gridbcast certs init " +
                               dir.string() + "'");
  if (const std::string bad = node_name_problem(node); !bad.empty())
    throw std::runtime_error("cannot issue a certificate for node \"" + node + "\": " + bad);
  Key ca_key = read_key(ca_key_path);
  Cert ca = read_cert(ca_cert_path);
  if (X509_check_private_key(ca.get(), ca_key.get()) != 1)
    fail(ca_key_path.string() + " does not belong to " + ca_cert_path.string());

  Key key = new_key();
  Cert cert = new_cert(key.get(), node, options);
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get())) != 1)
    fail("cannot set the issuer");
  add_ext(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_ext(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature");
  add_ext(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth,clientAuth");
  add_san(cert.get(), node);
  add_ext(cert.get(), ca.get(), NID_subject_key_identifier, "hash");
  add_ext(cert.get(), ca.get(), NID_authority_key_identifier, "keyid:always");
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0)
    fail("cannot sign the certificate of " + node);
  write_key(node_key_path(dir, node), key.get(), options.overwrite);
  write_cert(node_cert_path(dir, node), cert.get(), options.overwrite);
}

}  // namespace gridbcast::lanes
