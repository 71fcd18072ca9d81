#include "lanes/certs.hpp"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
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
#include <string>
#include <utility>

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

// A descriptor closed when it goes out of scope (the paths that throw).
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, for callers that must see close's error (NFS reports late
  // write failures there).
  int close() {
    const int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

std::string errno_text() {
  return std::strerror(errno);
}

// The PEM text of a key or certificate, wiped from memory when it goes.
class Pem {
 public:
  explicit Pem(std::string text) : text_(std::move(text)) {}
  ~Pem() { OPENSSL_cleanse(text_.data(), text_.size()); }
  Pem(const Pem&) = delete;
  Pem& operator=(const Pem&) = delete;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

Pem pem_of(BIO* bio, const std::filesystem::path& path) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  if (n <= 0 || data == nullptr) fail("cannot write " + path.string());
  return Pem(std::string(data, static_cast<size_t>(n)));
}

Pem key_pem(EVP_PKEY* key, const std::filesystem::path& path) {
  // A secure-heap BIO: OpenSSL wipes it when freed.
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_secmem()), BIO_free);
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    fail("cannot write the key " + path.string());
  return pem_of(bio.get(), path);
}

Pem cert_pem(X509* cert, const std::filesystem::path& path) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1)
    fail("cannot write the certificate " + path.string());
  return pem_of(bio.get(), path);
}

[[noreturn]] void refuse_existing(const std::filesystem::path& path) {
  throw std::runtime_error(path.string() + " exists already (use --force to replace it)");
}

// The directory files are written into, held open so that every step below
// works on the same directory even if its path is renamed meanwhile.
class Dir {
 public:
  explicit Dir(const std::filesystem::path& path)
      : path_(path.empty() ? std::filesystem::path(".") : path),
        fd_(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_.get() < 0)
      throw std::runtime_error("cannot open the directory " + path_.string() + ": " + errno_text());
  }
  int fd() const { return fd_.get(); }
  const std::filesystem::path& path() const { return path_; }
  bool has(const std::string& name) const {
    struct stat st {};
    if (::fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return true;
    if (errno == ENOENT) return false;
    throw std::runtime_error("cannot look at " + (path_ / name).string() + ": " + errno_text());
  }
  // Makes the renames durable: until then a crash could bring back the old names.
  void sync() const {
    if (::fsync(fd_.get()) != 0)
      throw std::runtime_error("cannot sync the directory " + path_.string() + ": " + errno_text());
  }

 private:
  std::filesystem::path path_;
  Fd fd_;
};

// A file written in full to a new, randomly named file beside its final name,
// then renamed over it by commit(). The old file's inode is never opened for
// writing: a descriptor someone opened on it while it was readable keeps
// reading the old bytes, never the new key (O_TRUNC on the old inode handed it
// the new one). The temporary file is removed unless committed.
class PendingFile {
 public:
  PendingFile(const Dir& dir, const std::filesystem::path& path, const std::string& bytes,
              mode_t mode)
      : dir_(dir), path_(path), name_(path.filename().string()) {
    Fd fd = create_temp(mode);
    try {
      // The mode given to open is narrowed by the umask: set it exactly. A key
      // is 0600 from its creation on, so this never widens what others could see.
      if (::fchmod(fd.get(), mode) != 0) fail_errno("cannot set the mode of");
      for (size_t done = 0; done < bytes.size();) {
        const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) errno = EIO;  // no progress and no error: never loop on it
        if (n <= 0) fail_errno("cannot write");
        done += static_cast<size_t>(n);
      }
      if (::fsync(fd.get()) != 0) fail_errno("cannot sync");
      if (fd.close() != 0) fail_errno("cannot write");
    } catch (...) {
      remove_temp();  // the destructor does not run for a constructor that throws
      throw;
    }
  }
  ~PendingFile() { remove_temp(); }
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;

  // Puts the file in place. Without overwrite an existing file is refused,
  // also one that appeared since the caller looked.
  void commit(bool overwrite) {
    if (overwrite) {
      if (::renameat(dir_.fd(), temp_.c_str(), dir_.fd(), name_.c_str()) != 0)
        fail_errno("cannot replace");
    } else if (::renameat2(dir_.fd(), temp_.c_str(), dir_.fd(), name_.c_str(), RENAME_NOREPLACE) !=
               0) {
      if (errno == EEXIST) refuse_existing(path_);
      if (errno != EINVAL && errno != ENOSYS) fail_errno("cannot create");
      // A file system without RENAME_NOREPLACE: a hard link refuses an existing name too.
      if (::linkat(dir_.fd(), temp_.c_str(), dir_.fd(), name_.c_str(), 0) != 0) {
        if (errno == EEXIST) refuse_existing(path_);
        fail_errno("cannot create");
      }
      if (::unlinkat(dir_.fd(), temp_.c_str(), 0) != 0)
        throw std::runtime_error("cannot remove " + (dir_.path() / temp_).string() + ": " +
                                 errno_text());
    }
    temp_.clear();
  }

 private:
  Fd create_temp(mode_t mode) {
    // Random, so nobody can prepare the name in advance; O_EXCL and O_NOFOLLOW
    // refuse anything already there, a symbolic link included.
    for (int attempt = 0; attempt < 16; ++attempt) {
      unsigned char r[8];
      if (RAND_bytes(r, sizeof r) != 1) fail("no random bytes for a temporary file name");
      std::string name = "." + name_ + ".tmp-";
      for (const unsigned char b : r) {
        char hex[3];
        std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(b));
        name += hex;
      }
      const int fd = ::openat(dir_.fd(), name.c_str(),
                              O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
      if (fd >= 0) {
        temp_ = std::move(name);
        return Fd(fd);
      }
      if (errno != EEXIST)
        throw std::runtime_error("cannot create a temporary file in " + dir_.path().string() +
                                 " for " + path_.string() + ": " + errno_text());
    }
    throw std::runtime_error("cannot create a temporary file in " + dir_.path().string() + " for " +
                             path_.string() + ": every name tried exists");
  }

  // Best effort: it runs while another error is on its way to the user.
  void remove_temp() {
    if (!temp_.empty()) ::unlinkat(dir_.fd(), temp_.c_str(), 0);
    temp_.clear();
  }

  [[noreturn]] void fail_errno(const std::string& what) const {
    throw std::runtime_error(what + " " + path_.string() + ": " + errno_text());
  }

  const Dir& dir_;
  std::filesystem::path path_;
  std::string name_;
  std::string temp_;  // empty once committed
};

// Writes a key (0600) and its certificate (0644), both in `key_path`'s
// directory: both are written in full before either is renamed into place, so
// a failure leaves the old pair, not a new key beside an old certificate.
// Without overwrite, nothing is written when either file exists.
void write_key_and_cert(const std::filesystem::path& key_path, EVP_PKEY* key,
                        const std::filesystem::path& cert_path, X509* cert, bool overwrite) {
  const Pem key_text = key_pem(key, key_path);
  const Pem cert_text = cert_pem(cert, cert_path);
  const Dir dir(key_path.parent_path());
  if (!overwrite)
    for (const auto& p : {key_path, cert_path})
      if (dir.has(p.filename().string())) refuse_existing(p);
  PendingFile key_file(dir, key_path, key_text.text(), 0600);
  PendingFile cert_file(dir, cert_path, cert_text.text(), 0644);
  key_file.commit(overwrite);
  cert_file.commit(overwrite);
  dir.sync();
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
  write_key_and_cert(dir / kCaKeyFile, key.get(), dir / kCaCertFile, cert.get(), options.overwrite);
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
  write_key_and_cert(node_key_path(dir, node), key.get(), node_cert_path(dir, node), cert.get(),
                     options.overwrite);
}

}  // namespace gridbcast::lanes
