#include "common/grpc/testing/test_pki.h"

#include <cstdio>
#include <memory>

#include "absl/strings/str_join.h"
#include "common/base/check.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace moe::common::rpc::testing {
namespace {

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertDeleter {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;
using Cert = std::unique_ptr<X509, CertDeleter>;

Key NewKey() {
  Key key(EVP_EC_gen("P-256"));
  MOE_CHECK(key != nullptr);
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  MOE_CHECK(ext != nullptr);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

Cert NewCert(const std::string& cn, EVP_PKEY* key, long serial) {
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return cert;
}

void WritePem(const std::string& path, X509* cert) {
  FILE* f = std::fopen(path.c_str(), "w");
  MOE_CHECK(f != nullptr);
  MOE_CHECK(PEM_write_X509(f, cert) == 1);
  std::fclose(f);
}

void WritePem(const std::string& path, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  MOE_CHECK(f != nullptr);
  MOE_CHECK(PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1);
  std::fclose(f);
}

template <typename T, typename Read>
T ReadPem(const std::string& path, Read read) {
  FILE* f = std::fopen(path.c_str(), "r");
  MOE_CHECK(f != nullptr);
  T value(read(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  MOE_CHECK(value != nullptr);
  return value;
}

}  // namespace

CertFiles TestPki::Ca(const std::string& name) {
  Key key = NewKey();
  Cert cert = NewCert(name + " test CA", key.get(), serial_++);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE");
  AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash");
  MOE_CHECK(X509_sign(cert.get(), key.get(), EVP_sha256()) > 0);
  CertFiles out{dir_ + "/" + name + "-ca.pem", dir_ + "/" + name + "-ca.key"};
  WritePem(out.cert_file, cert.get());
  WritePem(out.key_file, key.get());
  return out;
}

CertFiles TestPki::Issue(const CertFiles& ca, const std::string& name,
                         const std::vector<std::string>& sans, const std::string& file_name) {
  Cert ca_cert = ReadPem<Cert>(ca.cert_file, PEM_read_X509);
  Key ca_key = ReadPem<Key>(ca.key_file, PEM_read_PrivateKey);
  Key key = NewKey();
  Cert cert = NewCert(name, key.get(), serial_++);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get()));
  AddExtension(cert.get(), ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE");
  AddExtension(cert.get(), ca_cert.get(), NID_key_usage, "critical,digitalSignature");
  AddExtension(cert.get(), ca_cert.get(), NID_ext_key_usage, "serverAuth,clientAuth");
  AddExtension(cert.get(), ca_cert.get(), NID_authority_key_identifier, "keyid");
  if (!sans.empty()) {
    AddExtension(cert.get(), ca_cert.get(), NID_subject_alt_name, absl::StrJoin(sans, ","));
  }
  MOE_CHECK(X509_sign(cert.get(), ca_key.get(), EVP_sha256()) > 0);
  const std::string base = dir_ + "/" + (file_name.empty() ? name : file_name);
  CertFiles out{base + ".pem", base + ".key"};
  // Key first, then the certificate: a watcher that reads between the two sees a new key with
  // the old certificate, fails to pair them and keeps the last good pair.
  WritePem(out.key_file, key.get());
  WritePem(out.cert_file, cert.get());
  return out;
}

}  // namespace moe::common::rpc::testing
