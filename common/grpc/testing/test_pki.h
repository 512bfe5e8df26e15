// The tests' throwaway PKI: common/grpc/pki.h with failures as test-stopping CHECKs, so that a
// test reads as the certificates it needs.
//
//   TestPki pki(dir);
//   CertFiles ca = pki.Ca("cluster");
//   CertFiles server = pki.Issue(ca, "server", {"DNS:localhost"});
//   CertFiles gateway = pki.Issue(ca, "gateway", {"URI:spiffe://moe.test/gateway"});
#pragma once

#include <string>
#include <vector>

#include "common/grpc/pki.h"

namespace moe::common::rpc::testing {

using ::moe::common::rpc::CertFiles;

class TestPki {
 public:
  explicit TestPki(std::string dir) : pki_(std::move(dir)) {}

  // Pki::Ca ("<name> CA"): <dir>/<name>-ca.pem and -ca.key.
  CertFiles Ca(const std::string& name);
  // Pki::Issue: <dir>/<file_name>.pem and .key; the same file name again is a rotation.
  CertFiles Issue(const CertFiles& ca, const std::string& name,
                  const std::vector<std::string>& sans, const std::string& file_name = "");

 private:
  Pki pki_;
};

}  // namespace moe::common::rpc::testing
