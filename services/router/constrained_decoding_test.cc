// Constrained decoding in the router over the real engine (tiny preset), the scheduler stepped
// on the test thread: outputs are in the grammar's language, a constrained greedy request gives
// the same tokens alone and in a mixed batch, max_tokens exhaustion ends with length, and the
// proto constraint compiles once per schema.
#include <memory>
#include <string>
#include <vector>

#include "common/metrics/registry.h"
#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/router/core/router_core.h"
#include "services/router/router_server.h"

namespace moe::router {
namespace {

namespace pb = ::moe::router::v1;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

constexpr const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 99},
    "pets": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {
        "kind": {"enum": ["cat", "dog"]}, "indoor": {"type": "boolean"}},
        "required": ["kind", "indoor"], "additionalProperties": false}}},
    "required": ["name", "age", "pets"], "additionalProperties": false})";

struct Output {
  std::vector<int32_t> tokens;
  generation::FinishReason finish = generation::FinishReason::kNone;
};

class ConstrainedDecodingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("constrained_decoding_test"));
    model::MakeModelOptions make;
    make.preset = model::Preset::kTiny;
    ASSERT_OK(model::MakeModel(make, *dir_));
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    RouterCoreOptions options;
    options.model_dir = *dir_;
    options.model_name = "tiny";
    options.num_threads = 1;
    options.kv_num_blocks = 512;
    ASSERT_OK_AND_ASSIGN(core_, RouterCore::Create(options, registry_, common::SystemClock::Get()));
    ASSERT_NE(core_->grammar_cache(), nullptr);
    ASSERT_OK_AND_ASSIGN(tokenizer_, tokenizer::Tokenizer::FromFile(*dir_));
    const auto& config = core_->config();
    server_ = std::make_unique<RouterServer>(
        core_->scheduler(),
        RouterServerInfo{.model_name = "tiny",
                         .vocab_size = config.vocab_size,
                         .max_context = config.max_position_embeddings},
        common::SystemClock::Get(), *auth_);
    server_->set_grammar_cache(core_->grammar_cache());
  }

  GenerateRequest Request(const std::string& prompt, const generation::Constraint& c,
                          float temperature, int32_t max_tokens = 200) {
    GenerateRequest r;
    r.prompt_token_ids = tokenizer_->Encode(prompt);
    r.sampling.temperature = temperature;
    r.sampling.seed = 7;
    r.sampling.max_tokens = max_tokens;
    if (c.active()) {
      auto g = core_->grammar_cache()->Get(c);
      EXPECT_TRUE(g.ok()) << g.status();
      if (g.ok()) r.grammar = *g;
    }
    return r;
  }

  // Submits all, steps until idle, returns each request's tokens and finish reason.
  std::vector<Output> Run(std::vector<GenerateRequest> requests) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (GenerateRequest& r : requests) {
      auto sub = core_->scheduler().Submit(std::move(r));
      EXPECT_TRUE(sub.ok()) << sub.status();
      if (!sub.ok()) return {};
      streams.push_back(sub->stream);
    }
    std::vector<Output> out(streams.size());
    while (core_->scheduler().HasWork()) {
      core_->scheduler().Step();
      for (size_t i = 0; i < streams.size(); ++i) {
        while (auto e = streams[i]->Next(absl::ZeroDuration())) {
          out[i].tokens.insert(out[i].tokens.end(), e->token_ids.begin(), e->token_ids.end());
          if (e->final()) out[i].finish = e->finish_reason;
        }
      }
    }
    return out;
  }

  // The rendered text without the final end token.
  std::string Text(const Output& o) {
    std::vector<int32_t> ids = o.tokens;
    if (o.finish == generation::FinishReason::kStop && !ids.empty()) ids.pop_back();
    return tokenizer_->Decode(ids, /*skip_special_tokens=*/true);
  }

  std::shared_ptr<const grammar::CompiledGrammar> Compiled(const generation::Constraint& c) {
    return *core_->grammar_cache()->Get(c);
  }

  static std::string* dir_;
  common::metrics::Registry registry_;
  std::unique_ptr<RouterCore> core_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<common::rpc::Authorizer> auth_ =
      common::rpc::Authorizer::AllowAll("router", registry_);
  std::unique_ptr<RouterServer> server_;
};

std::string* ConstrainedDecodingTest::dir_ = nullptr;

const generation::Constraint kJson{.kind = generation::ConstraintKind::kJsonSchema,
                                   .spec = kSchema};

TEST_F(ConstrainedDecodingTest, GreedyAndSampledOutputsAreInTheSchemasLanguage) {
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(Request(absl::StrCat("Person number ", i, ":"), kJson, i % 2 ? 0.8f : 0));
  }
  const std::vector<Output> out = Run(std::move(requests));
  for (const Output& o : out) {
    EXPECT_EQ(o.finish, generation::FinishReason::kStop);
    EXPECT_TRUE(Compiled(kJson)->Matches(Text(o))) << Text(o);
  }
}

TEST_F(ConstrainedDecodingTest, AConstrainedGreedyRequestAloneEqualsItInAMixedBatch) {
  const Output alone = Run({Request("Describe a person:", kJson, 0)})[0];
  ASSERT_EQ(alone.finish, generation::FinishReason::kStop);
  const generation::Constraint regex{.kind = generation::ConstraintKind::kRegex,
                                     .spec = "[a-z]{3,9}( [0-9]+)?"};
  std::vector<GenerateRequest> mixed;
  mixed.push_back(Request("Another one:", regex, 0.9f));
  mixed.push_back(Request("Tell me a story", {}, 0.7f, 40));
  mixed.push_back(Request("Describe a person:", kJson, 0));
  mixed.push_back(
      Request("Some JSON please", {.kind = generation::ConstraintKind::kJsonObject}, 1.0f, 60));
  mixed.push_back(Request("Describe a person:", {}, 0, 50));
  mixed.push_back(Request("Who?", kJson, 1.0f));
  const std::vector<Output> out = Run(std::move(mixed));
  EXPECT_EQ(out[2].tokens, alone.tokens);  // bitwise: same ids, same length
  EXPECT_EQ(out[2].finish, alone.finish);
  EXPECT_NE(out[4].tokens, alone.tokens);  // the same prompt unconstrained goes elsewhere
  EXPECT_TRUE(Compiled(regex)->Matches(Text(out[0]))) << Text(out[0]);
}

TEST_F(ConstrainedDecodingTest, TheEndTokenComesWithoutAnotherEngineStep) {
  const generation::Constraint choice{.kind = generation::ConstraintKind::kChoice,
                                      .choices = {"the quick brown fox"}};
  const Output o = Run({Request("Say it:", choice, 0)})[0];
  ASSERT_EQ(o.finish, generation::FinishReason::kStop);
  EXPECT_EQ(Text(o), "the quick brown fox");
  EXPECT_TRUE(tokenizer_->IsEos(o.tokens.back()));
  // One step per text token (the prefill makes the first); none for the end token.
  EXPECT_EQ(core_->scheduler().GetStats().num_steps, static_cast<int64_t>(o.tokens.size()) - 1);
}

TEST_F(ConstrainedDecodingTest, AGrammarThatCannotFinishWithinMaxTokensEndsWithLength) {
  const Output o = Run({Request("Describe a person:", kJson, 0, 4)})[0];
  EXPECT_EQ(o.finish, generation::FinishReason::kLength);
  EXPECT_EQ(o.tokens.size(), 4u);
  EXPECT_TRUE(Compiled(kJson)->IsPrefix(Text(o)));
}

TEST_F(ConstrainedDecodingTest, ProtoConstraintsCompileOncePerSchemaAndBadOnesAreRefused) {
  pb::GenerateRequest req;
  req.add_prompt_token_ids(5);
  req.set_max_tokens(8);
  req.mutable_constraint()->set_json_schema(kSchema);
  ASSERT_OK_AND_ASSIGN(GenerateRequest a, server_->FromProto(req));
  ASSERT_NE(a.grammar, nullptr);
  const double compiled = *registry_.Value("moe_grammar_compilations_total");
  ASSERT_OK_AND_ASSIGN(GenerateRequest b, server_->FromProto(req));
  EXPECT_EQ(b.grammar.get(), a.grammar.get());
  EXPECT_EQ(*registry_.Value("moe_grammar_compilations_total"), compiled);
  EXPECT_GE(*registry_.Value("moe_grammar_cache_hits_total"), 1);

  req.mutable_constraint()->set_json_schema(R"({"type": "object", "not": {}})");
  EXPECT_THAT(server_->FromProto(req),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("constraint: schema /: keyword 'not' is not supported")));
  req.mutable_constraint()->set_json_object(false);
  EXPECT_THAT(server_->FromProto(req), StatusIs(absl::StatusCode::kInvalidArgument));
  req.mutable_constraint()->mutable_choice();
  EXPECT_THAT(server_->FromProto(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no choices")));
  req.mutable_constraint()->set_regex("a(?=b)");
  EXPECT_THAT(server_->FromProto(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lookaround")));

  RouterServer without(core_->scheduler(), RouterServerInfo{.max_context = 4096},
                       common::SystemClock::Get(), *auth_);
  req.mutable_constraint()->set_regex("abc");
  EXPECT_THAT(without.FromProto(req), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace moe::router
