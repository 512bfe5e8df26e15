#include "services/gateway/core/completion_session.h"

#include <utility>

#include "services/gateway/core/api_error.h"

namespace moe::gateway {

using generation::FinishReason;
using generation::Usage;

CompletionSession::CompletionSession(SessionParams params, const tokenizer::Tokenizer& tokenizer,
                                     std::shared_ptr<ResponseWriter> writer, common::Clock& clock,
                                     GatewayMetrics& metrics, std::function<void()> on_done)
    : params_(std::move(params)),
      tokenizer_(tokenizer),
      writer_(std::move(writer)),
      clock_(clock),
      metrics_(metrics),
      on_done_(std::move(on_done)),
      detok_(tokenizer, params_.skip_special_tokens),
      stop_(params_.stop, params_.include_stop_str_in_output) {
  if (params_.tools) {
    tools_.emplace(params_.tools->mode, params_.tools->format, params_.tools->functions,
                   params_.tools->named, std::hash<std::string>{}(params_.meta.id));
  }
}

CompletionSession::~CompletionSession() = default;

void CompletionSession::Start(GenerateBackend& backend, GenerateRequest request) {
  std::unique_ptr<GenerateCall> call = backend.Generate(std::move(request), shared_from_this());
  GenerateCall* to_cancel = nullptr;
  {
    absl::MutexLock lock(&mu_);
    call_ = std::move(call);
    // A stop string or a disconnect may have come before Generate() returned.
    if (cancel_requested_) to_cancel = call_.get();
  }
  if (to_cancel != nullptr) to_cancel->Cancel();
}

void CompletionSession::Cancel() {
  GenerateCall* to_cancel = nullptr;
  {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
    if (finished_ || cancel_requested_) return;
    cancel_requested_ = true;
    to_cancel = call_.get();
  }
  if (to_cancel != nullptr) to_cancel->Cancel();
}

RenderedLogprob CompletionSession::RenderLogprob(int32_t token_id, const TokenLogprobs& lp) const {
  const int32_t one[1] = {token_id};
  RenderedLogprob out;
  out.token = tokenizer_.Decode(one, /*skip_special_tokens=*/false);
  out.logprob = lp.logprob;
  for (const TopLogprob& t : lp.top) {
    const int32_t alt[1] = {t.token_id};
    out.top.emplace_back(tokenizer_.Decode(alt, /*skip_special_tokens=*/false), t.logprob);
  }
  return out;
}

void CompletionSession::OnUpdate(GenerateUpdate update) {
  GenerateCall* to_cancel = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    const absl::Time now = clock_.Now();
    if (!update.token_ids.empty()) {
      if (!first_token_at_) {
        first_token_at_ = now;
        metrics_.ttft_seconds.Observe(absl::ToDoubleSeconds(now - params_.received));
        metrics_.stage_route_seconds.Observe(absl::ToDoubleSeconds(now - params_.received));
      }
      last_token_at_ = now;
    }
    if (client_gone_) return;  // the cancellation's final callback ends the session
    const absl::Time render_start = clock_.Now();
    // With kStop the last token is the stop token: counted in usage, never rendered.
    size_t render_n = update.token_ids.size();
    if (update.finish == FinishReason::kStop && render_n > 0) --render_n;
    std::string delta;
    std::vector<RenderedLogprob> lps;
    bool hit = false;
    for (size_t i = 0; i < update.token_ids.size() && !hit; ++i) {
      ++tokens_seen_;
      if (i >= render_n) break;
      const int32_t id = update.token_ids[i];
      std::string piece = detok_.Add(id);
      if (params_.logprobs && i < update.logprobs.size()) {
        RenderedLogprob rl = RenderLogprob(id, update.logprobs[i]);
        rl.text_offset = text_bytes_ + static_cast<int32_t>(delta.size());
        lps.push_back(std::move(rl));
      }
      StopMatcher::Result r = stop_.Add(piece);
      delta += r.text;
      hit = r.stopped;
    }
    if (!hit && update.finish != FinishReason::kNone && update.finish != FinishReason::kError) {
      StopMatcher::Result r = stop_.Add(detok_.Finish());
      delta += r.text;
      hit = r.stopped;
      if (!hit) delta += stop_.Flush();
    }
    text_bytes_ += static_cast<int32_t>(delta.size());
    std::vector<ToolCallDelta> tool_deltas;
    if (tools_) {
      ToolCallParser::Output o = tools_->Add(delta);
      delta = std::move(o.content);
      tool_deltas = std::move(o.deltas);
    }
    if (params_.stream) {
      EnsureStreamStartedLocked();
      if (!delta.empty() || !lps.empty()) {
        writer_->Write(
            SseEvent(RenderChunk(params_.meta, /*role=*/false, delta, FinishReason::kNone,
                                 params_.logprobs ? &lps : nullptr, params_.include_usage)));
      }
      if (!tool_deltas.empty()) {
        writer_->Write(
            SseEvent(RenderToolCallChunk(params_.meta, tool_deltas, params_.include_usage)));
      }
    } else {
      text_ += delta;
      for (RenderedLogprob& lp : lps) logprobs_.push_back(std::move(lp));
    }
    metrics_.stage_render_seconds.Observe(absl::ToDoubleSeconds(clock_.Now() - render_start));
    if (hit) {
      // Stopped by a stop string: usage as far as we know it; end the generation at once.
      FinishLocked(FinishReason::kStop, std::nullopt);
      if (update.finish == FinishReason::kNone) {
        cancel_requested_ = true;
        to_cancel = call_.get();
      }
    } else if (update.finish == FinishReason::kError) {
      FailLocked(absl::InternalError(update.error_message.empty() ? "generation failed"
                                                                  : update.error_message));
    } else if (update.finish != FinishReason::kNone) {
      FinishLocked(update.finish, update.usage);
    }
  }
  if (to_cancel != nullptr) to_cancel->Cancel();
}

void CompletionSession::OnFailed(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  if (client_gone_) {
    finished_ = true;
    EndLocked(FinishReason::kAbort);
    return;
  }
  FailLocked(status);
}

void CompletionSession::WhenReady(std::function<void()> more) {
  bool wait;
  {
    absl::MutexLock lock(&mu_);
    wait = params_.stream && stream_started_ && !finished_ && !client_gone_;
  }
  // Outside mu_: the writer may run `more` at once, and `more` reads the next message.
  if (wait) {
    writer_->WhenWritable(std::move(more));
  } else {
    more();
  }
}

void CompletionSession::EnsureStreamStartedLocked() {
  if (stream_started_) return;
  stream_started_ = true;
  writer_->StartStream(200, {{"Cache-Control", "no-cache"}});
  if (params_.meta.endpoint == Endpoint::kChatCompletions) {
    writer_->Write(SseEvent(RenderChunk(params_.meta, /*role=*/true, "", FinishReason::kNone,
                                        nullptr, params_.include_usage)));
  }
}

void CompletionSession::FinishLocked(FinishReason reason, std::optional<Usage> usage) {
  finished_ = true;
  Usage u = usage.value_or(Usage{params_.prompt_tokens, tokens_seen_, 0});
  if (u.prompt_tokens == 0) u.prompt_tokens = params_.prompt_tokens;
  metrics_.prompt_tokens_total.Increment(u.prompt_tokens);
  metrics_.generation_tokens_total.Increment(u.completion_tokens);
  metrics_.cached_prompt_tokens_total.Increment(u.cached_prompt_tokens);
  // Account for the request (metrics, in-flight slot) before the client can see its end, so a
  // client that reads the last byte and then scrapes /metrics or sends again sees it finished.
  EndLocked(reason);
  if (tools_) {
    FinishToolsLocked(reason, u);
    return;
  }
  if (params_.stream) {
    EnsureStreamStartedLocked();
    std::vector<RenderedLogprob> none;
    writer_->Write(
        SseEvent(RenderChunk(params_.meta, /*role=*/false, "", reason,
                             params_.logprobs ? &none : nullptr, params_.include_usage)));
    if (params_.include_usage) writer_->Write(SseEvent(RenderUsageChunk(params_.meta, u)));
    writer_->Write(std::string(kSseDone));
    writer_->End();
  } else {
    HttpResponse response;
    response.body =
        RenderResponse(params_.meta, text_, reason, u, params_.logprobs ? &logprobs_ : nullptr);
    writer_->Send(std::move(response));
  }
}

void CompletionSession::FinishToolsLocked(FinishReason reason, const Usage& usage) {
  ToolCallParser::Output tail = tools_->Finish();
  const bool called = !tools_->calls().empty();
  // OpenAI: "tool_calls" when the model chose to call (auto, required); a forced named call
  // ends with "stop".
  std::string finish(generation::FinishReasonName(reason));
  if (called && reason == FinishReason::kStop && tools_->mode() != ToolCallMode::kNamed) {
    finish = "tool_calls";
  }
  if (params_.stream) {
    EnsureStreamStartedLocked();
    if (!tail.content.empty()) {
      writer_->Write(SseEvent(RenderChunk(params_.meta, /*role=*/false, tail.content,
                                          FinishReason::kNone, nullptr, params_.include_usage)));
    }
    if (!tail.deltas.empty()) {
      writer_->Write(
          SseEvent(RenderToolCallChunk(params_.meta, tail.deltas, params_.include_usage)));
    }
    std::vector<RenderedLogprob> none;
    writer_->Write(SseEvent(RenderFinishChunk(
        params_.meta, finish, params_.logprobs ? &none : nullptr, params_.include_usage)));
    if (params_.include_usage) writer_->Write(SseEvent(RenderUsageChunk(params_.meta, usage)));
    writer_->Write(std::string(kSseDone));
    writer_->End();
    return;
  }
  std::string content = text_ + tail.content;
  if (called && content.find_first_not_of(" \t\r\n") == std::string::npos) content.clear();
  HttpResponse response;
  response.body = RenderToolResponse(params_.meta, content, tools_->calls(), finish, usage,
                                     params_.logprobs ? &logprobs_ : nullptr);
  writer_->Send(std::move(response));
}

void CompletionSession::FailLocked(const absl::Status& status) {
  finished_ = true;
  ApiError error = ApiError::FromStatus(status, params_.retry_after_s);
  EndLocked(status.code() == absl::StatusCode::kCancelled ? FinishReason::kAbort
                                                          : FinishReason::kError);
  if (stream_started_) {
    writer_->Write(SseEvent(error.ToJson()));
    writer_->Write(std::string(kSseDone));
    writer_->End();
  } else {
    writer_->Send(error.ToResponse());
  }
}

void CompletionSession::EndLocked(FinishReason reason) {
  const absl::Time now = clock_.Now();
  metrics_.CountFinish(reason);
  metrics_.e2e_seconds.Observe(absl::ToDoubleSeconds(now - params_.received));
  if (first_token_at_ && tokens_seen_ > 1) {
    metrics_.tpot_seconds.Observe(absl::ToDoubleSeconds(last_token_at_ - *first_token_at_) /
                                  (tokens_seen_ - 1));
  }
  if (on_done_) {
    std::function<void()> done = std::move(on_done_);
    on_done_ = nullptr;
    // The slot is held until the client has the bytes (or is cut), not just until generation ends.
    writer_->WhenFlushed(std::move(done));
  }
}

}  // namespace moe::gateway
