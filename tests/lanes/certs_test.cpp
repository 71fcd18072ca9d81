// The grid CA and node certificates that `gridbcast certs` writes.
#include "lanes/certs.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "lanes/tls.hpp"
#include "support/temp_dir.hpp"

namespace gridbcast::lanes {
namespace {

using testing::TempDir;

unsigned mode_of(const std::filesystem::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};

std::unique_ptr<X509, X509Free> read_cert(const std::filesystem::path& p) {
  FILE* f = std::fopen(p.c_str(), "r");
  EXPECT_NE(f, nullptr) << p;
  if (f == nullptr) return nullptr;
  std::unique_ptr<X509, X509Free> x(PEM_read_X509(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  return x;
}

TEST(Certs, InitWritesAPrivateKeyAndASelfSignedCa) {
  TempDir t;
  const auto dir = t / "grid";
  create_grid_ca(dir, "test grid CA");
  EXPECT_EQ(mode_of(dir / kCaKeyFile), 0600u);
  EXPECT_EQ(mode_of(dir), 0700u);
  auto ca = read_cert(dir / kCaCertFile);
  ASSERT_TRUE(ca);
  EXPECT_EQ(X509_check_ca(ca.get()), 1);
  EXPECT_EQ(X509_check_issued(ca.get(), ca.get()), X509_V_OK);
  // A second init must not silently replace the CA every certificate hangs on.
  try {
    create_grid_ca(dir, "again");
    FAIL() << "replaced an existing CA";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("exists already"), std::string::npos) << e.what();
  }
}

TEST(Certs, IssueWritesKeysWithMode0600AndCertificatesNamingTheNode) {
  TempDir t;
  create_grid_ca(t.path(), "test grid CA");
  issue_node_cert(t.path(), "b1");
  EXPECT_EQ(mode_of(node_key_path(t.path(), "b1")), 0600u);
  auto ca = read_cert(t / kCaCertFile);
  auto cert = read_cert(node_cert_path(t.path(), "b1"));
  ASSERT_TRUE(ca && cert);
  EXPECT_EQ(X509_check_issued(ca.get(), cert.get()), X509_V_OK);
  EXPECT_EQ(X509_verify(cert.get(), X509_get0_pubkey(ca.get())), 1);
  EXPECT_EQ(X509_check_ca(cert.get()), 0);
  EXPECT_EQ(X509_check_host(cert.get(), "b1", 0, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT, nullptr), 1);
  EXPECT_EQ(X509_check_host(cert.get(), "b2", 0, 0, nullptr), 0);
  char cn[64] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof cn);
  EXPECT_STREQ(cn, "b1");
  // The loader takes what was issued.
  EXPECT_NO_THROW(TlsContext::load(t.path(), "b1"));
}

TEST(Certs, IssueWithoutACaSaysHowToMakeOne) {
  TempDir t;
  try {
    issue_node_cert(t.path(), "b1");
    FAIL() << "issued without a CA";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("gridbcast certs init"), std::string::npos) << e.what();
  }
}

TEST(Certs, MissingFilesAreNamedWithTheCommandThatCreatesThem) {
  TempDir t;
  try {
    TlsContext::load(t.path(), "a1");
    FAIL() << "loaded without files";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find((t / "ca.crt").string()), std::string::npos) << m;
    EXPECT_NE(m.find("gridbcast certs init"), std::string::npos) << m;
  }
  create_grid_ca(t.path(), "test grid CA");
  try {
    TlsContext::load(t.path(), "a1");
    FAIL() << "loaded without the node's certificate";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find((t / "a1.crt").string()), std::string::npos) << m;
    EXPECT_NE(m.find("gridbcast certs issue"), std::string::npos) << m;
  }
}

// The DNS names a certificate's subject alternative name extension carries.
std::vector<std::string> dns_names(X509* cert) {
  std::vector<std::string> out;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans != nullptr && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(sans, i);
    if (gn->type == GEN_DNS)
      out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(gn->d.dNSName)),
                       static_cast<size_t>(ASN1_STRING_length(gn->d.dNSName)));
  }
  GENERAL_NAMES_free(sans);
  return out;
}

// "DNS:" + node used to go through OpenSSL's configuration syntax, so a node
// named "x1,DNS:w1" got a certificate valid for w1 too.
TEST(Certs, NodeNamesThatCouldInjectSubjectAlternativeNamesAreRefused) {
  TempDir t;
  create_grid_ca(t.path(), "test grid CA");
  for (const std::string& bad : std::vector<std::string>{"x1,DNS:w1", "x1:w1", "x1 w1", "a\r", "-x",
                                                         ".x", "x/y", "", std::string("x\0y", 3)}) {
    try {
      issue_node_cert(t.path(), bad);
      auto cert = read_cert(node_cert_path(t.path(), bad));
      FAIL() << "issued a certificate for \"" << bad << "\" with names "
             << (cert ? dns_names(cert.get()).size() : 0);
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot issue a certificate for node"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(t / "x1,DNS:w1.crt"));
  // A good name gets exactly one DNS name, itself.
  issue_node_cert(t.path(), "n-01.site_a");
  auto cert = read_cert(node_cert_path(t.path(), "n-01.site_a"));
  ASSERT_TRUE(cert);
  EXPECT_EQ(dns_names(cert.get()), std::vector<std::string>{"n-01.site_a"});
}

// As ssh does: a key others can read is refused, naming the file and the fix.
TEST(Certs, KeyFilesReadableByGroupOrOthersAreRefused) {
  TempDir t;
  create_grid_ca(t.path(), "test grid CA");
  issue_node_cert(t.path(), "b1");
  const auto key = node_key_path(t.path(), "b1");
  for (const auto mode : {0644, 0640, 0604, 0660}) {
    ASSERT_EQ(::chmod(key.c_str(), static_cast<mode_t>(mode)), 0);
    try {
      TlsContext::load(t.path(), "b1");
      FAIL() << "loaded a key with mode " << std::oct << mode;
    } catch (const std::exception& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("refusing the key " + key.string()), std::string::npos) << m;
      EXPECT_NE(m.find("chmod 600"), std::string::npos) << m;
    }
  }
  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
  EXPECT_NO_THROW(TlsContext::load(t.path(), "b1"));
  // The CA key too, before anything is signed with it.
  ASSERT_EQ(::chmod((t / kCaKeyFile).c_str(), 0644), 0);
  EXPECT_THROW(issue_node_cert(t.path(), "b2"), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(node_cert_path(t.path(), "b2")));
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << p;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What a descriptor opened earlier reads now, from the start of its file.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    EXPECT_GE(n, 0) << std::strerror(errno);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
    at += n;
  }
}

ino_t inode_of(const std::filesystem::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_ino;
}

// Files in `dir` that are neither keys nor certificates (temporary files left over).
std::vector<std::string> strays(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto ext = e.path().extension();
    if (ext != ".key" && ext != ".crt") out.push_back(e.path().filename().string());
  }
  return out;
}

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<EVP_PKEY, PkeyFree> read_key(const std::filesystem::path& p) {
  FILE* f = std::fopen(p.c_str(), "r");
  EXPECT_NE(f, nullptr) << p;
  if (f == nullptr) return nullptr;
  std::unique_ptr<EVP_PKEY, PkeyFree> k(PEM_read_PrivateKey(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  return k;
}

// --force used to open the existing key with O_TRUNC and write the new key into
// the same inode, so a descriptor another process opened while the old file
// was readable (before a chmod 600, say) read the new private key. Now the new
// key is a new file renamed over the old name; the old inode is never written.
TEST(Certs, ForceRenamesNewFilesIntoPlaceSoAnOpenDescriptorNeverSeesTheNewKey) {
  TempDir t;
  create_grid_ca(t.path(), "test grid CA");
  issue_node_cert(t.path(), "b1");
  CertOptions force;
  force.overwrite = true;
  CertOptions ca_force{std::chrono::seconds{-3600}, std::chrono::hours(24 * 365 * 10), true};
  struct Case {
    std::filesystem::path key, cert;
    std::function<void()> replace;
  };
  const std::vector<Case> cases{
      {t / kCaKeyFile, t / kCaCertFile, [&] { create_grid_ca(t.path(), "new CA", ca_force); }},
      {node_key_path(t.path(), "b1"), node_cert_path(t.path(), "b1"),
       [&] { issue_node_cert(t.path(), "b1", force); }},
  };
  // A umask that would narrow a certificate's 0644: the modes are set exactly.
  struct Umask {
    mode_t saved = ::umask(077);
    ~Umask() { ::umask(saved); }
  } umask_077;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.key.string());
    const std::string old_key = read_all(c.key);
    const ino_t old_inode = inode_of(c.key);
    const int fd = ::open(c.key.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    c.replace();
    // The old descriptor still reads the old key, and its file is gone from the directory.
    EXPECT_EQ(read_all(fd), old_key);
    struct stat held {};
    ASSERT_EQ(::fstat(fd, &held), 0);
    EXPECT_EQ(held.st_ino, old_inode);
    EXPECT_EQ(held.st_nlink, 0u);
    ::close(fd);
    // The name holds a new file: another inode, mode 0600, a new key that the
    // new certificate belongs to.
    EXPECT_NE(inode_of(c.key), old_inode);
    EXPECT_EQ(mode_of(c.key), 0600u);
    EXPECT_EQ(mode_of(c.cert), 0644u);
    const std::string new_key = read_all(c.key);
    EXPECT_NE(new_key, old_key);
    EXPECT_NE(new_key.find("PRIVATE KEY"), std::string::npos);
    auto key = read_key(c.key);
    auto cert = read_cert(c.cert);
    ASSERT_TRUE(key && cert);
    EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1);
  }
  EXPECT_EQ(strays(t.path()), std::vector<std::string>{});
  // The node certificate issued after the CA was replaced hangs on the new CA.
  auto ca = read_cert(t / kCaCertFile);
  auto b1 = read_cert(node_cert_path(t.path(), "b1"));
  ASSERT_TRUE(ca && b1);
  EXPECT_EQ(X509_verify(b1.get(), X509_get0_pubkey(ca.get())), 1);
}

TEST(Certs, WithoutForceAnExistingFileIsRefusedAndLeftUnchanged) {
  TempDir t;
  create_grid_ca(t.path(), "test grid CA");
  issue_node_cert(t.path(), "b1");
  const std::vector<std::filesystem::path> files{t / kCaKeyFile, t / kCaCertFile,
                                                 node_key_path(t.path(), "b1"),
                                                 node_cert_path(t.path(), "b1")};
  std::vector<std::string> bytes;
  std::vector<ino_t> inodes;
  for (const auto& f : files) {
    bytes.push_back(read_all(f));
    inodes.push_back(inode_of(f));
  }
  const auto refused = [](const std::function<void()>& f, const std::filesystem::path& named) {
    try {
      f();
      ADD_FAILURE() << "replaced " << named << " without --force";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(named.string() + " exists already (use --force"),
                std::string::npos)
          << e.what();
    }
  };
  refused([&] { create_grid_ca(t.path(), "another CA"); }, t / kCaKeyFile);
  refused([&] { issue_node_cert(t.path(), "b1"); }, node_key_path(t.path(), "b1"));
  for (size_t i = 0; i < files.size(); ++i) {
    EXPECT_EQ(read_all(files[i]), bytes[i]) << files[i];
    EXPECT_EQ(inode_of(files[i]), inodes[i]) << files[i];
  }
  // One file of a pair is enough to refuse: nothing is written, so a new key
  // never lands beside a certificate for the old one.
  ASSERT_TRUE(std::filesystem::remove(node_key_path(t.path(), "b1")));
  refused([&] { issue_node_cert(t.path(), "b1"); }, node_cert_path(t.path(), "b1"));
  EXPECT_FALSE(std::filesystem::exists(node_key_path(t.path(), "b1")));
  EXPECT_EQ(read_all(node_cert_path(t.path(), "b1")), bytes[3]);
  EXPECT_EQ(strays(t.path()), std::vector<std::string>{});
}

// A replacement that fails says which file and why, and leaves no temporary file.
TEST(Certs, AFailedReplacementNamesTheFileAndLeavesNoTemporaryFile) {
  TempDir t;
  create_grid_ca(t.path(), "test grid CA");
  const auto crt = node_cert_path(t.path(), "b1");
  std::filesystem::create_directories(crt / "inside");  // rename cannot put a file there
  CertOptions force;
  force.overwrite = true;
  try {
    issue_node_cert(t.path(), "b1", force);
    FAIL() << "replaced a directory";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(crt.string()), std::string::npos) << m;
    EXPECT_NE(m.find(std::strerror(EISDIR)), std::string::npos) << m;
  }
  EXPECT_TRUE(std::filesystem::is_directory(crt / "inside"));
  std::vector<std::string> left = strays(t.path());
  std::erase(left, crt.filename().string());  // the directory itself ends in .crt
  EXPECT_EQ(left, std::vector<std::string>{});
}

}  // namespace
}  // namespace gridbcast::lanes
