#include "common/grpc/pki.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace moe::common::rpc {
namespace {

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertDeleter {
  void operator()(X509* c) const { X509_free(c); }
};
struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;
using Cert = std::unique_ptr<X509, CertDeleter>;
using File = std::unique_ptr<FILE, FileCloser>;

absl::Status Failed(const std::string& what) {
  return absl::InternalError(absl::StrCat("pki: ", what, " failed"));
}

absl::StatusOr<Key> NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (key == nullptr) return Failed("EC P-256 key generation");
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return Failed(absl::StrCat("extension \"", value, "\""));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return added == 1 ? absl::OkStatus() : Failed(absl::StrCat("adding extension \"", value, "\""));
}

Cert NewCert(const std::string& cn, EVP_PKEY* key, long serial, absl::Duration validity) {
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), absl::ToInt64Seconds(validity));
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return cert;
}

// `mode` applies when the file is created; an existing file is truncated and its mode kept
// (a rotation does not widen a key file's permissions).
absl::StatusOr<File> OpenForWrite(const std::string& path, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Failed(absl::StrCat("writing \"", path, "\""));
  File f(::fdopen(fd, "w"));
  if (f == nullptr) {
    ::close(fd);
    return Failed(absl::StrCat("writing \"", path, "\""));
  }
  return f;
}

absl::Status WritePem(const std::string& path, X509* cert) {
  absl::StatusOr<File> f = OpenForWrite(path, 0644);
  if (!f.ok()) return f.status();
  if (PEM_write_X509(f->get(), cert) != 1) return Failed(absl::StrCat("writing \"", path, "\""));
  return absl::OkStatus();
}

absl::Status WritePem(const std::string& path, EVP_PKEY* key) {
  absl::StatusOr<File> f = OpenForWrite(path, 0600);
  if (!f.ok()) return f.status();
  if (PEM_write_PrivateKey(f->get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Failed(absl::StrCat("writing \"", path, "\""));
  }
  return absl::OkStatus();
}

template <typename T, typename Read>
absl::StatusOr<T> ReadPem(const std::string& path, Read read) {
  File f(std::fopen(path.c_str(), "r"));
  if (f == nullptr) return Failed(absl::StrCat("reading \"", path, "\""));
  T value(read(f.get(), nullptr, nullptr, nullptr));
  if (value == nullptr) return Failed(absl::StrCat("parsing \"", path, "\""));
  return value;
}

}  // namespace

absl::StatusOr<CertFiles> Pki::Ca(const std::string& name) {
  absl::StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  Cert cert = NewCert(name + " CA", key->get(), serial_++, validity_);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  for (const auto& [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                                   std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                                   std::pair{NID_subject_key_identifier, "hash"}}) {
    if (absl::Status s = AddExtension(cert.get(), cert.get(), nid, value); !s.ok()) return s;
  }
  if (X509_sign(cert.get(), key->get(), EVP_sha256()) <= 0) return Failed("signing the CA");
  CertFiles out{dir_ + "/" + name + "-ca.pem", dir_ + "/" + name + "-ca.key"};
  if (absl::Status s = WritePem(out.cert_file, cert.get()); !s.ok()) return s;
  if (absl::Status s = WritePem(out.key_file, key->get()); !s.ok()) return s;
  return out;
}

absl::StatusOr<CertFiles> Pki::Issue(const CertFiles& ca, const std::string& name,
                                     const std::vector<std::string>& sans,
                                     const std::string& file_name) {
  absl::StatusOr<Cert> ca_cert = ReadPem<Cert>(ca.cert_file, PEM_read_X509);
  if (!ca_cert.ok()) return ca_cert.status();
  absl::StatusOr<Key> ca_key = ReadPem<Key>(ca.key_file, PEM_read_PrivateKey);
  if (!ca_key.ok()) return ca_key.status();
  absl::StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  Cert cert = NewCert(name, key->get(), serial_++, validity_);
  X509* issuer = ca_cert->get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer));
  for (const auto& [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
                                   std::pair{NID_key_usage, "critical,digitalSignature"},
                                   std::pair{NID_ext_key_usage, "serverAuth,clientAuth"},
                                   std::pair{NID_authority_key_identifier, "keyid"}}) {
    if (absl::Status s = AddExtension(cert.get(), issuer, nid, value); !s.ok()) return s;
  }
  if (!sans.empty()) {
    if (absl::Status s =
            AddExtension(cert.get(), issuer, NID_subject_alt_name, absl::StrJoin(sans, ","));
        !s.ok()) {
      return s;
    }
  }
  if (X509_sign(cert.get(), ca_key->get(), EVP_sha256()) <= 0) {
    return Failed(absl::StrCat("signing \"", name, "\""));
  }
  const std::string base = dir_ + "/" + (file_name.empty() ? name : file_name);
  CertFiles out{base + ".pem", base + ".key"};
  if (absl::Status s = WritePem(out.key_file, key->get()); !s.ok()) return s;
  if (absl::Status s = WritePem(out.cert_file, cert.get()); !s.ok()) return s;
  return out;
}

}  // namespace moe::common::rpc
