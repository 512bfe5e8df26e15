// A throwaway PKI for tests: a CA and certificates signed by it, with the SANs a test needs,
// written as PEM files under a directory. Made with OpenSSL at test time (nothing expires in
// the repository), EC P-256 keys so that making one takes about a millisecond.
//
//   TestPki pki(dir);
//   CertFiles ca = pki.Ca("cluster");
//   CertFiles server = pki.Issue(ca, "server", {"DNS:localhost"});
//   CertFiles gateway = pki.Issue(ca, "gateway", {"URI:spiffe://moe.test/gateway"});
#pragma once

#include <string>
#include <vector>

namespace moe::common::rpc::testing {

struct CertFiles {
  std::string cert_file;  // PEM certificate
  std::string key_file;   // PEM private key (empty for nothing)
};

class TestPki {
 public:
  explicit TestPki(std::string dir) : dir_(std::move(dir)) {}

  // A self-signed CA named `name`: <dir>/<name>-ca.pem and -ca.key.
  CertFiles Ca(const std::string& name);
  // A leaf certificate for `name` signed by `ca`, with subjectAltNames in OpenSSL's form
  // ("DNS:localhost", "URI:spiffe://moe.test/gateway", "IP:127.0.0.1"). Written to
  // <dir>/<file_name>.pem and .key (file_name defaults to name); issuing again with the same
  // file name overwrites (a rotation).
  CertFiles Issue(const CertFiles& ca, const std::string& name,
                  const std::vector<std::string>& sans, const std::string& file_name = "");

 private:
  const std::string dir_;
  long serial_ = 1;
};

}  // namespace moe::common::rpc::testing
