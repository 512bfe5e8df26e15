#include "common/grammar/json_schema.h"

#include <memory>
#include <string>

#include "common/grammar/testing/grammar_test_util.h"
#include "common/grammar/testing/test_vocabulary.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::grammar {
namespace {

using ::moe::common::testing::StatusIs;
using testing::ByteVocabulary;
using testing::CompileForTest;
using ::testing::HasSubstr;
using testing::Schema;

class JsonSchemaTest : public ::testing::Test {
 protected:
  std::shared_ptr<const CompiledGrammar> Compile(const std::string& schema) {
    auto g = CompileForTest(Schema(schema), ByteVocabulary(), registry_);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : nullptr;
  }
  absl::Status Error(const std::string& schema) {
    return CompileForTest(Schema(schema), ByteVocabulary(), registry_).status();
  }
  common::metrics::Registry registry_;
};

TEST_F(JsonSchemaTest, ObjectsKeepPropertyOrderWithOptionalProperties) {
  auto g = Compile(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "required": ["b"], "additionalProperties": false})");
  EXPECT_TRUE(g->Matches(R"({"b":"x"})"));
  EXPECT_TRUE(g->Matches(R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(g->Matches(R"({"a": -12, "b": "x"})"));
  EXPECT_TRUE(g->Matches("{\n  \"b\" : \"\",\n  \"c\": false\n}"));
  EXPECT_FALSE(g->Matches(R"({"a":1})"));          // b is required
  EXPECT_FALSE(g->Matches(R"({"b":"x","a":1})"));  // declared order
  EXPECT_FALSE(g->Matches(R"({"b":"x","d":1})"));  // no extras
  EXPECT_FALSE(g->Matches(R"({"b":"x",})"));       // trailing comma
  EXPECT_FALSE(g->Matches(R"({"b":"x"}  )"));      // nothing after the value
  EXPECT_FALSE(g->Matches("{\"b\":     \"x\"}"));  // at most 4 whitespace characters
}

TEST_F(JsonSchemaTest, AllOptionalObjectsAndAdditionalProperties) {
  auto g = Compile(R"({"properties": {"a": {"type": "null"}}, "additionalProperties": true})");
  EXPECT_TRUE(g->Matches("{}"));
  EXPECT_TRUE(g->Matches(R"({"a":null})"));
  EXPECT_TRUE(g->Matches(R"({"a":null,"zz":[1,{"q":"r"}]})"));
  EXPECT_TRUE(g->Matches(R"({"zz":2.5e3})"));
  EXPECT_FALSE(g->Matches(R"({"a":1})"));  // a declared name is no extra
  EXPECT_FALSE(g->Matches(R"({"a":null,"a":1})"));
  EXPECT_TRUE(g->Matches(R"({"ab":1,"":2,"b":3})"));
}

TEST_F(JsonSchemaTest, ArraysWithBounds) {
  auto g = Compile(R"({"type": "array", "items": {"enum": ["x", 2, null]},
                      "minItems": 1, "maxItems": 3})");
  EXPECT_TRUE(g->Matches(R"(["x"])"));
  EXPECT_TRUE(g->Matches(R"([2, null, "x"])"));
  EXPECT_FALSE(g->Matches("[]"));
  EXPECT_FALSE(g->Matches(R"([2,2,2,2])"));
  EXPECT_FALSE(g->Matches(R"(["y"])"));
  g = Compile(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"const": "k"}],
                  "items": false})");
  EXPECT_TRUE(g->Matches(R"([7,"k"])"));
  EXPECT_FALSE(g->Matches(R"([7,"k",1])"));
}

TEST_F(JsonSchemaTest, StringsCountCharactersAndKeepUtf8Valid) {
  auto g = Compile(R"({"type": "string", "minLength": 1, "maxLength": 3})");
  EXPECT_TRUE(g->Matches(R"("abc")"));
  EXPECT_TRUE(g->Matches("\"\xc3\xa9\xe2\x82\xac\""));  // two characters, five bytes
  EXPECT_TRUE(g->Matches(R"("\n\"\u00e9")"));
  EXPECT_FALSE(g->Matches(R"("abcd")"));
  EXPECT_FALSE(g->Matches(R"("")"));
  EXPECT_FALSE(g->Matches("\"a\nb\""));     // raw control character
  EXPECT_FALSE(g->Matches(R"("\ud800")"));  // lone surrogate escape
  EXPECT_FALSE(g->IsPrefix("\"\xc3\x28"));  // broken UTF-8
  g = Compile(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(g->Matches(R"("2024-02-29")"));
  EXPECT_FALSE(g->Matches(R"("2024-13-01")"));
}

TEST_F(JsonSchemaTest, IntegerAndNumberRanges) {
  auto g = Compile(R"({"type": "integer", "minimum": -5, "maximum": 120})");
  for (const char* ok : {"-5", "-1", "0", "7", "99", "100", "120"})
    EXPECT_TRUE(g->Matches(ok)) << ok;
  for (const char* bad : {"-6", "121", "007", "-0", "1.5", "200"})
    EXPECT_FALSE(g->Matches(bad)) << bad;
  g = Compile(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000})");
  EXPECT_TRUE(g->Matches("1"));
  EXPECT_TRUE(g->Matches("999"));
  EXPECT_FALSE(g->Matches("0"));
  EXPECT_FALSE(g->Matches("1000"));
  g = Compile(R"({"type": "integer"})");
  EXPECT_TRUE(g->Matches("-123456789012345678"));
  EXPECT_FALSE(g->Matches("1234567890123456789"));  // at most 18 digits
  g = Compile(R"({"type": "number", "minimum": 0.5, "maximum": 10})");
  for (const char* ok : {"1", "10", "9.75", "1.0"}) EXPECT_TRUE(g->Matches(ok)) << ok;
  for (const char* bad : {"0", "10.5", "11", "-1", "1e3"}) EXPECT_FALSE(g->Matches(bad)) << bad;
  g = Compile(R"({"type": "number", "minimum": -2, "maximum": -1})");
  EXPECT_TRUE(g->Matches("-1.5"));
  EXPECT_TRUE(g->Matches("-2"));
  EXPECT_FALSE(g->Matches("-2.5"));
  g = Compile(R"({"type": "number"})");
  EXPECT_TRUE(g->Matches("-0.25e-10"));
}

TEST_F(JsonSchemaTest, EnumsConstAnyOfAndTypeLists) {
  auto g = Compile(R"({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "null"},
                                {"enum": [{"k": [1]}, "caf\u00e9"]}]})");
  EXPECT_TRUE(g->Matches(R"("ab")"));
  EXPECT_TRUE(g->Matches("null"));
  EXPECT_TRUE(g->Matches(R"({"k":[1]})"));
  EXPECT_TRUE(g->Matches("\"caf\xc3\xa9\""));
  EXPECT_FALSE(g->Matches("true"));
  g = Compile(R"({"type": ["integer", "boolean"]})");
  EXPECT_TRUE(g->Matches("3"));
  EXPECT_TRUE(g->Matches("false"));
  EXPECT_FALSE(g->Matches("\"3\""));
}

TEST_F(JsonSchemaTest, RefsIntoDefsAndRecursion) {
  auto g = Compile(R"({"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v", "kids"], "additionalProperties": false}},
      "$ref": "#/$defs/node"})");
  EXPECT_TRUE(g->Matches(R"({"v":1,"kids":[]})"));
  EXPECT_TRUE(
      g->Matches(R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":4,"kids":[]}]})"));
  EXPECT_FALSE(g->Matches(R"({"v":1,"kids":[{"v":2}]})"));
}

TEST_F(JsonSchemaTest, AnyValueAndJsonObjectMode) {
  auto g = Compile("{}");
  EXPECT_TRUE(g->Matches(R"([1,{"a":null},"x",true])"));
  EXPECT_TRUE(g->Matches("12"));
  common::metrics::Registry r;
  auto obj = CompileForTest({.kind = generation::ConstraintKind::kJsonObject}, ByteVocabulary(), r);
  ASSERT_TRUE(obj.ok());
  EXPECT_TRUE((*obj)->Matches(R"({"a":[1,{"b":{}}]})"));
  EXPECT_FALSE((*obj)->Matches("[1]"));
  EXPECT_FALSE((*obj)->Matches("\"x\""));
}

TEST_F(JsonSchemaTest, BadSchemasNameTheProblemAndWhere) {
  EXPECT_THAT(Error("{"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
  EXPECT_THAT(Error(R"({"type": "object", "properties": {"a": {"not": {}}}})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("schema /properties/a: keyword 'not' is not supported")));
  EXPECT_THAT(Error(R"({"type": "object", "properties": {}, "required": ["x"]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("required property 'x' is not in 'properties'")));
  EXPECT_THAT(Error(R"({"$ref": "#/$defs/missing"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("points to nothing")));
  EXPECT_THAT(Error(R"({"$ref": "https://example.com/s.json"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only local $ref")));
  EXPECT_THAT(Error(R"({"$ref": "#"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("left recursion")));
  EXPECT_THAT(Error(R"({"type": "strin"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown type 'strin'")));
  EXPECT_THAT(Error(R"({"type": "integer", "minimum": 5, "maximum": 4})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no integer")));
  EXPECT_THAT(Error(R"({"type": "array", "uniqueItems": true})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("uniqueItems")));
  EXPECT_THAT(Error(R"j({"type": "string", "pattern": "(?=x)"})j"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("schema /pattern: regex: lookaround")));
  EXPECT_THAT(Error(R"({"type": "string", "maxLength": 100000})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("maxLength")));
}

}  // namespace
}  // namespace moe::grammar
