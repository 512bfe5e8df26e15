// A throwaway PKI: a CA and certificates signed by it, with the SANs each peer needs, written as
// PEM files under a directory. `moe up` makes one per secure run (security.mtls) and the tests
// make one per test (testing/test_pki.h wraps this), so nothing that expires is kept in the
// repository. EC P-256 keys: making one takes about a millisecond. Private keys are written
// readable by the owner only (0600).
//
//   Pki pki(dir);
//   ASSIGN_OR_RETURN(CertFiles ca, pki.Ca("cluster"));
//   ASSIGN_OR_RETURN(CertFiles router,
//                    pki.Issue(ca, "router", {"DNS:localhost", "URI:spiffe://moe.local/router"}));
//
// Not thread-safe (one owner issues in turn; serials count up).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace moe::common::rpc {

struct CertFiles {
  std::string cert_file;  // PEM certificate
  std::string key_file;   // PEM private key (empty for nothing)
};

class Pki {
 public:
  // Certificates are valid from an hour ago (clock skew) for `validity`.
  explicit Pki(std::string dir, absl::Duration validity = absl::Hours(24))
      : dir_(std::move(dir)), validity_(validity) {}

  // A self-signed CA named `name`: <dir>/<name>-ca.pem and -ca.key.
  absl::StatusOr<CertFiles> Ca(const std::string& name);
  // A leaf certificate for `name` (its CN) signed by `ca`, usable as server and client, with
  // subjectAltNames in OpenSSL's form ("DNS:localhost", "URI:spiffe://moe.local/gateway",
  // "IP:127.0.0.1"). Written to <dir>/<file_name>.pem and .key (file_name defaults to name);
  // issuing again with the same file name overwrites (a rotation: the key first, so a watcher
  // that reads between the two sees a mismatched pair and keeps its last good one).
  // Errors: kInternal naming the OpenSSL step or the file that failed.
  absl::StatusOr<CertFiles> Issue(const CertFiles& ca, const std::string& name,
                                  const std::vector<std::string>& sans,
                                  const std::string& file_name = "");

 private:
  const std::string dir_;
  const absl::Duration validity_;
  long serial_ = 1;
};

}  // namespace moe::common::rpc
