// multipart/form-data (RFC 7578) request bodies, as OpenAI's audio upload sends them: parts
// with a name, an optional filename and content type, and their bytes. The parts are views
// into the body (no copy of the audio).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::gateway {

struct FormPart {
  std::string name;
  std::string filename;      // "" when the part is no file
  std::string content_type;  // "" when not given
  std::string_view data;     // into the body
};

// `content_type` is the request's Content-Type header (its boundary parameter is used).
// kInvalidArgument when it is not multipart/form-data with a boundary, or the body is not
// well formed (no closing boundary, a part without Content-Disposition or name), or it has
// more than `max_parts` parts.
absl::StatusOr<std::vector<FormPart>> ParseMultipartFormData(std::string_view body,
                                                             std::string_view content_type,
                                                             int max_parts = 64);

}  // namespace moe::gateway
