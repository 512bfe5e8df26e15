#include "common/grpc/testing/test_pki.h"

#include "common/base/check.h"

namespace moe::common::rpc::testing {

CertFiles TestPki::Ca(const std::string& name) {
  absl::StatusOr<CertFiles> ca = pki_.Ca(name);
  MOE_CHECK_OK(ca.status());
  return *ca;
}

CertFiles TestPki::Issue(const CertFiles& ca, const std::string& name,
                         const std::vector<std::string>& sans, const std::string& file_name) {
  absl::StatusOr<CertFiles> cert = pki_.Issue(ca, name, sans, file_name);
  MOE_CHECK_OK(cert.status());
  return *cert;
}

}  // namespace moe::common::rpc::testing
