#include "common/http/response_parser.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace moe::common::http {

void ResponseParser::Append(std::string_view bytes) { buf_.append(bytes); }

size_t ResponseParser::LineEnd(size_t from) const { return buf_.find("\r\n", from); }

void ResponseParser::Consume(size_t to) {
  pos_ = to;
  // Compact once the consumed prefix dominates, so a long stream stays linear.
  if (pos_ > 4096 && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

ResponseParser::Result ResponseParser::ParseHead(HttpResponse& head) {
  const size_t end = buf_.find("\r\n\r\n", pos_);
  if (end == std::string::npos) return Result::kIncomplete;
  const size_t status_end = LineEnd(pos_);
  const std::string_view status_line(buf_.data() + pos_, status_end - pos_);
  // "HTTP/1.1 200 OK": the code at offset 9.
  if (status_line.size() < 12 || status_line.substr(0, 5) != "HTTP/") return Result::kMalformed;
  head.status = std::atoi(std::string(status_line.substr(9, 3)).c_str());
  head.headers.clear();
  for (size_t at = status_end + 2; at < end + 2;) {
    const size_t eol = LineEnd(at);
    const std::string_view line(buf_.data() + at, eol - at);
    at = eol + 2;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    size_t v = colon + 1;
    while (v < line.size() && (line[v] == ' ' || line[v] == '\t')) ++v;
    head.headers[name] = std::string(line.substr(v));
  }
  Consume(end + 4);
  return Result::kComplete;
}

ResponseParser::Result ResponseParser::ParseChunk(std::string& chunk) {
  const size_t size_end = LineEnd(pos_);
  if (size_end == std::string::npos) return Result::kIncomplete;
  const std::string size_line = buf_.substr(pos_, size_end - pos_);
  char* parsed_to = nullptr;
  const unsigned long size = std::strtoul(size_line.c_str(), &parsed_to, 16);
  if (parsed_to == size_line.c_str()) return Result::kMalformed;
  const size_t data = size_end + 2;
  if (buf_.size() < data + size) return Result::kIncomplete;
  // The data ends with CRLF (for the last chunk: the empty line after the trailers).
  const size_t data_end = LineEnd(data + size);
  if (data_end == std::string::npos) return Result::kIncomplete;
  chunk.assign(buf_, data, size);
  Consume(data_end + 2);
  return Result::kComplete;
}

ResponseParser::Result ResponseParser::ParseBytes(size_t n, std::string& out) {
  if (buffered() < n) return Result::kIncomplete;
  out.assign(buf_, pos_, n);
  Consume(pos_ + n);
  return Result::kComplete;
}

}  // namespace moe::common::http
