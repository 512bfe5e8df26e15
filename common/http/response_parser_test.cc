#include "common/http/response_parser.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::common::http {
namespace {

using Result = ResponseParser::Result;

constexpr char kChunked[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding:  chunked\r\n\r\n"
    "7\r\ndata: 1\r\n"
    "e\r\ndata: [DONE]\n\n\r\n"
    "0\r\n\r\n"
    "HTTP/1.1 204 No Content\r\n\r\n";

// Parses kChunked whole, and renders what came out: "status;headers|chunk|chunk|...".
std::string ParseAll(ResponseParser& p) {
  std::string out;
  HttpResponse head;
  if (p.ParseHead(head) != Result::kComplete) return "head incomplete";
  out = std::to_string(head.status) + ";";
  for (const auto& [k, v] : head.headers) out += k + "=" + v + ",";
  for (;;) {
    std::string chunk;
    if (p.ParseChunk(chunk) != Result::kComplete) return out + "|chunk incomplete";
    out += "|" + chunk;
    if (chunk.empty()) break;
  }
  if (p.ParseHead(head) != Result::kComplete) return out + "|second head incomplete";
  return out + "|" + std::to_string(head.status);
}

constexpr char kWant[] =
    "200;content-type=text/event-stream,transfer-encoding=chunked,|data: 1|data: [DONE]\n\n||204";

TEST(ResponseParserTest, ParsesAChunkedResponseAndTheNextOne) {
  ResponseParser p;
  p.Append(kChunked);
  EXPECT_EQ(ParseAll(p), kWant);
  EXPECT_EQ(p.buffered(), 0u);
}

TEST(ResponseParserTest, ConsumesNothingUntilAPieceIsComplete) {
  // One byte at a time: every piece is taken exactly when its last byte arrives.
  ResponseParser p;
  const std::string bytes = kChunked;
  std::vector<std::string> pieces;
  HttpResponse head;
  std::string chunk;
  int stage = 0;  // 0 head, 1 chunks, 2 second head
  for (char c : bytes) {
    p.Append(std::string_view(&c, 1));
    for (bool progress = true; progress;) {
      progress = false;
      if (stage == 0 || stage == 2) {
        if (p.ParseHead(head) == Result::kComplete) {
          pieces.push_back(std::to_string(head.status));
          ++stage;
          progress = true;
        }
      } else if (stage == 1 && p.ParseChunk(chunk) == Result::kComplete) {
        pieces.push_back("[" + chunk + "]");
        if (chunk.empty()) ++stage;
        progress = true;
      }
    }
  }
  EXPECT_THAT(pieces,
              ::testing::ElementsAre("200", "[data: 1]", "[data: [DONE]\n\n]", "[]", "204"));
}

TEST(ResponseParserTest, ContentLengthBody) {
  ResponseParser p;
  p.Append("HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nab");
  HttpResponse head;
  ASSERT_EQ(p.ParseHead(head), Result::kComplete);
  EXPECT_EQ(head.status, 404);
  EXPECT_EQ(head.headers["content-length"], "5");
  std::string body;
  EXPECT_EQ(p.ParseBytes(5, body), Result::kIncomplete);
  p.Append("cde");
  ASSERT_EQ(p.ParseBytes(5, body), Result::kComplete);
  EXPECT_EQ(body, "abcde");
}

TEST(ResponseParserTest, MalformedInput) {
  ResponseParser garbage;
  garbage.Append("NOT HTTP AT ALL\r\n\r\n");
  HttpResponse head;
  EXPECT_EQ(garbage.ParseHead(head), Result::kMalformed);
  ResponseParser bad_chunk;
  bad_chunk.Append("zz\r\nhello\r\n");
  std::string chunk;
  EXPECT_EQ(bad_chunk.ParseChunk(chunk), Result::kMalformed);
}

TEST(ResponseParserTest, LongStreamsStayCompact) {
  ResponseParser p;
  std::string chunk;
  for (int i = 0; i < 10000; ++i) {
    p.Append("5\r\nhello\r\n");
    ASSERT_EQ(p.ParseChunk(chunk), Result::kComplete);
  }
  EXPECT_EQ(p.buffered(), 0u);
}

}  // namespace
}  // namespace moe::common::http
