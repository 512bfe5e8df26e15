#include "services/gateway/core/multipart.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moe::gateway {
namespace {

// Debian's abseil has its own string_view.
absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// The value of `key` in a header's parameters (`; key="value"` or `; key=value`), "" when
// absent.
std::string Param(std::string_view header, std::string_view key) {
  for (absl::string_view piece : absl::StrSplit(A(header), ';')) {
    piece = absl::StripAsciiWhitespace(piece);
    const size_t eq = piece.find('=');
    if (eq == absl::string_view::npos) continue;
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(piece.substr(0, eq)), A(key))) continue;
    absl::string_view v = absl::StripAsciiWhitespace(piece.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return std::string(v);
  }
  return "";
}

}  // namespace

absl::StatusOr<std::vector<FormPart>> ParseMultipartFormData(std::string_view body,
                                                             std::string_view content_type,
                                                             int max_parts) {
  if (!absl::StartsWithIgnoreCase(absl::StripAsciiWhitespace(A(content_type)),
                                  "multipart/form-data")) {
    return absl::InvalidArgumentError(
        "The request must be multipart/form-data (a file upload), not '" +
        std::string(content_type) + "'.");
  }
  const std::string boundary = Param(content_type, "boundary");
  if (boundary.empty() || boundary.size() > 200) {
    return absl::InvalidArgumentError("The multipart Content-Type has no boundary.");
  }
  const std::string delimiter = "--" + boundary;
  size_t pos = body.find(delimiter);
  if (pos == std::string_view::npos) {
    return absl::InvalidArgumentError("The multipart body has no part.");
  }
  std::vector<FormPart> parts;
  for (;;) {
    pos += delimiter.size();
    if (body.substr(pos, 2) == "--") return parts;  // the closing delimiter
    if (body.substr(pos, 2) != "\r\n") {
      return absl::InvalidArgumentError("The multipart body is malformed (boundary line).");
    }
    pos += 2;
    const size_t headers_end = body.find("\r\n\r\n", pos);
    if (headers_end == std::string_view::npos) {
      return absl::InvalidArgumentError("The multipart body is truncated (part headers).");
    }
    FormPart part;
    bool disposition = false;
    for (absl::string_view line : absl::StrSplit(A(body.substr(pos, headers_end - pos)), "\r\n")) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) continue;
      const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
      const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      if (absl::EqualsIgnoreCase(name, "content-disposition")) {
        disposition = true;
        part.name = Param(value, "name");
        part.filename = Param(value, "filename");
      } else if (absl::EqualsIgnoreCase(name, "content-type")) {
        part.content_type = value;
      }
    }
    if (!disposition || part.name.empty()) {
      return absl::InvalidArgumentError("A multipart part has no Content-Disposition name.");
    }
    const size_t data_start = headers_end + 4;
    const size_t next = body.find("\r\n" + delimiter, data_start);
    if (next == std::string_view::npos) {
      return absl::InvalidArgumentError("The multipart body is truncated (no closing boundary).");
    }
    part.data = body.substr(data_start, next - data_start);
    parts.push_back(std::move(part));
    if (static_cast<int>(parts.size()) > max_parts) {
      return absl::InvalidArgumentError(
          absl::StrCat("The form has more than ", max_parts, " parts."));
    }
    pos = next + 2;
  }
}

}  // namespace moe::gateway
