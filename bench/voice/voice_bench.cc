// `moe bench voice`: the realtime voice pipeline's latency, end of speech -> first reply audio.
//
// A local cluster (router, asr, tts, and two gateways: speculative prefill on and off) on the
// small preset, started with port 0 under one common::process::Supervisor. Each run is a fresh
// /v1/realtime session (its own cache salt: no run helps another) that streams a recorded
// utterance (pocketsphinx-testdata librivox, 2.99 s, resampled to 24 kHz) paced in real time,
// then silence, with server VAD (300 ms pause). The runs alternate between the two gateways, so
// both modes see the same machine load.
//
// Per run, client side: the end of speech is the last voiced sample of the recording (the end of
// its last 10 ms frame louder than 10% of the loud frames' level), at the wall-clock time the
// pacing puts it; first audio is the arrival of the first response.output_audio.delta. The
// server's per-stage breakdown comes from response.done's `moe_timings` (realtime_session.h).
// Figures (DESIGN.md §6): voice_first_audio_ms_p50/p99 and voice_pipeline_ms_p50/p99 (the
// endpoint decision -> first audio byte, server side), speculative prefill on, with the off
// runs as the baseline. With --artifacts DIR (`moe bench all`), voice-stages.dat: the per-stage
// medians of both modes, which the voice-stages.png plot stacks.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/suite.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/core/detail/base64.hpp"
#include "boost/beast/websocket.hpp"
#include "common/audio/pcm.h"
#include "common/audio/resampler.h"
#include "common/audio/wav.h"
#include "common/base/status_macros.h"
#include "common/http/http_client.h"
#include "common/model/make_model.h"
#include "common/process/supervisor.h"
#include "nlohmann/json.hpp"

namespace moe::bench {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using common::process::Supervisor;

constexpr char kSpeech[] =
    "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav";
constexpr int kRate = 24000;
constexpr int kChunkMs = 40;
constexpr int kEndpointMs = 300;
constexpr int kFirstChunkMaxChars = 48;  // the tts service's first-chunk length cap, set below

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

std::string SelfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

std::string Base64(std::string_view bytes) {
  std::string out(beast::detail::base64::encoded_size(bytes.size()), '\0');
  out.resize(beast::detail::base64::encode(out.data(), bytes.data(), bytes.size()));
  return out;
}

// The recording at 24 kHz and the time of its last voiced sample, seconds.
struct Utterance {
  std::vector<int16_t> pcm;
  double speech_end_s = 0;
};

absl::StatusOr<Utterance> LoadUtterance() {
  std::ifstream in(kSpeech, std::ios::binary);
  if (!in)
    return absl::FailedPreconditionError(
        absl::StrCat(kSpeech, " is missing (pocketsphinx-testdata)"));
  std::stringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(audio::DecodedAudio wav, audio::DecodeWav(ss.str()));
  const size_t frame = static_cast<size_t>(wav.sample_rate / 100);
  std::vector<double> rms;
  for (size_t i = 0; i + frame <= wav.samples.size(); i += frame) {
    rms.push_back(audio::Rms(std::span<const int16_t>(wav.samples).subspan(i, frame)));
  }
  if (rms.empty()) return absl::InternalError("empty recording");
  const double loud = Percentile(rms, 0.95);
  size_t last = 0;
  for (size_t i = 0; i < rms.size(); ++i) {
    if (rms[i] > 0.1 * loud) last = i + 1;
  }
  Utterance u;
  u.speech_end_s = static_cast<double>(last * frame) / wav.sample_rate;
  ASSIGN_OR_RETURN(u.pcm, audio::Resample(wav.samples, wav.sample_rate, kRate));
  return u;
}

struct Turn {
  double first_audio_ms = 0;    // client: end of speech -> first audio delta
  double endpoint_wait_ms = 0;  // client: end of speech -> speech_stopped arrives
  Json timings;                 // the server's moe_timings
};

// One realtime session on a gateway: streams `u` (then 1.5 s of silence) paced in real time,
// waits for the first audio delta, cancels the reply, returns the timings at response.done.
class TurnClient {
 public:
  TurnClient(int port, std::string model, const Utterance& u)
      : port_(port), model_(std::move(model)), u_(u), ws_(ioc_), pace_(ioc_), deadline_(ioc_) {}

  absl::StatusOr<Turn> Run() {
    try {
      tcp::resolver resolver(ioc_);
      net::connect(ws_.next_layer(), resolver.resolve("127.0.0.1", std::to_string(port_)));
      ws_.read_message_max(64 << 20);
      ws_.handshake(absl::StrCat("127.0.0.1:", port_), "/v1/realtime?model=" + model_);
      ws_.write(net::buffer(
          Json{{"type", "session.update"},
               {"session",
                {{"type", "realtime"},
                 {"output_modalities", Json::array({"audio"})},
                 {"instructions", "Answer briefly."},
                 {"max_output_tokens", 48},
                 {"audio",
                  {{"input",
                    {{"format", {{"type", "audio/pcm"}, {"rate", kRate}}},
                     {"transcription", {{"model", "pocketsphinx"}}},
                     {"turn_detection",
                      {{"type", "server_vad"},
                       {"silence_duration_ms", kEndpointMs},
                       {"create_response", true}}}}},
                   {"output",
                    {{"format", {{"type", "audio/pcm"}, {"rate", kRate}}}, {"voice", "alloy"}}}}}}}}
              .dump()));
      for (;;) {  // up to session.updated
        beast::flat_buffer b;
        ws_.read(b);
        const Json e = Json::parse(beast::buffers_to_string(b.data()), nullptr, false);
        const std::string type = e.is_object() ? e.value("type", "") : "";
        if (type == "error") return absl::InternalError(e.dump());
        if (type == "session.updated") break;
      }
      // 1.5 s of silence after the speech: the endpoint needs the pause.
      audio_ = audio::PcmToBytes(u_.pcm);
      audio_.append(static_cast<size_t>(kRate * 3), '\0');
      start_ = Clock::now();
      speech_end_ = start_ + std::chrono::microseconds(static_cast<int64_t>(u_.speech_end_s * 1e6));
      deadline_.expires_after(std::chrono::seconds(90));
      deadline_.async_wait([this](beast::error_code ec) {
        if (!ec) Fail("no response.done within 90 s");
      });
      ReadNext();
      SchedulePace();
      ioc_.run();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("realtime session: ", e.what()));
    }
    if (!error_.empty()) return absl::InternalError(error_);
    return turn_;
  }

 private:
  void Fail(std::string why) {
    if (error_.empty() && !done_) error_ = std::move(why);
    Stop();
  }
  void Stop() {
    pace_.cancel();
    deadline_.cancel();
    beast::error_code ec;
    beast::get_lowest_layer(ws_).close(ec);
    ioc_.stop();
  }

  void SchedulePace() {
    const size_t chunk_bytes = kRate * 2 * kChunkMs / 1000;
    if (sent_bytes_ >= audio_.size()) return;
    ++chunks_;
    pace_.expires_at(start_ + std::chrono::milliseconds(kChunkMs * chunks_));
    pace_.async_wait([this](beast::error_code ec) {
      if (ec) return;
      const std::string_view pcm = std::string_view(audio_).substr(sent_bytes_, chunk_bytes);
      sent_bytes_ += pcm.size();
      Write(Json{{"type", "input_audio_buffer.append"}, {"audio", Base64(pcm)}}.dump());
      SchedulePace();
    });
  }

  void Write(std::string message) {
    out_.push_back(std::move(message));
    if (out_.size() == 1) WriteNext();
  }
  void WriteNext() {
    ws_.async_write(net::buffer(out_.front()), [this](beast::error_code ec, size_t) {
      if (ec) return Fail("write: " + ec.message());
      out_.pop_front();
      if (!out_.empty()) WriteNext();
    });
  }

  void ReadNext() {
    ws_.async_read(in_, [this](beast::error_code ec, size_t) {
      if (ec) return Fail("read: " + ec.message());
      const Clock::time_point now = Clock::now();
      const Json e = Json::parse(beast::buffers_to_string(in_.data()), nullptr, false);
      in_.consume(in_.size());
      const std::string type = e.is_object() ? e.value("type", "") : "";
      if (type == "error") return Fail(e.dump());
      if (type == "input_audio_buffer.speech_stopped" && !stopped_) {
        stopped_ = true;
        turn_.endpoint_wait_ms = Ms(now - speech_end_);
      } else if (type == "response.output_audio.delta" && !first_audio_) {
        first_audio_ = true;
        turn_.first_audio_ms = Ms(now - speech_end_);
        // The figure is taken: the rest of the reply would only cost time.
        Write(Json{{"type", "response.cancel"}}.dump());
      } else if (type == "response.done") {
        turn_.timings = e["response"].value("moe_timings", Json::object());
        if (!first_audio_) return Fail("response.done without audio: " + e.dump());
        done_ = true;
        return Stop();
      }
      ReadNext();
    });
  }

  const int port_;
  const std::string model_;
  const Utterance& u_;
  net::io_context ioc_;
  websocket::stream<tcp::socket> ws_;
  net::steady_timer pace_;
  net::steady_timer deadline_;
  beast::flat_buffer in_;
  std::deque<std::string> out_;
  std::string audio_;
  size_t sent_bytes_ = 0;
  int chunks_ = 0;
  Clock::time_point start_, speech_end_;
  bool stopped_ = false, first_audio_ = false, done_ = false;
  std::string error_;
  Turn turn_;
};

absl::StatusOr<const Supervisor::Member*> Start(Supervisor& group, const std::string& name,
                                                const std::string& binary,
                                                std::vector<std::string> args) {
  args.insert(args.begin(), binary);
  ASSIGN_OR_RETURN(const Supervisor::Member* m,
                   group.Start(name, {.argv = std::move(args)}, absl::Seconds(180)));
  if (m->ports.http) {
    const int port = *m->ports.http;
    RETURN_IF_ERROR(group.WaitReady(
        *m,
        [port]() -> absl::StatusOr<bool> {
          auto r = common::http::HttpCall(port, "GET", "/readyz");
          return r && r->status == 200;
        },
        absl::Now() + absl::Seconds(120), absl::Milliseconds(50)));
  } else if (!m->ports.grpc) {
    return absl::InternalError(name + ": no grpc port");
  }
  return m;
}

// The figures of one mode's runs.
struct Series {
  std::vector<double> first_audio, pipeline, endpoint_wait, asr_final, prefill, first_sentence,
      tts_first_chunk, speculated_tokens;
  int failures = 0;

  void Add(const Turn& t) {
    first_audio.push_back(t.first_audio_ms);
    endpoint_wait.push_back(t.endpoint_wait_ms);
    auto get = [&](const char* key, std::vector<double>& into) {
      if (t.timings.contains(key) && t.timings[key].is_number()) {
        into.push_back(t.timings[key].get<double>());
      }
    };
    get("pipeline_ms", pipeline);
    get("asr_final_ms", asr_final);
    get("prefill_ms", prefill);
    get("first_sentence_ms", first_sentence);
    get("tts_first_chunk_ms", tts_first_chunk);
    get("speculative_prefill_tokens", speculated_tokens);
  }
  Json Breakdown() const {
    return {{"endpoint_wait_ms_p50", Percentile(endpoint_wait, 0.5)},
            {"asr_finalize_ms_p50", Percentile(asr_final, 0.5)},
            {"prefill_ms_p50", Percentile(prefill, 0.5)},
            {"first_sentence_ms_p50", Percentile(first_sentence, 0.5)},
            {"tts_first_chunk_ms_p50", Percentile(tts_first_chunk, 0.5)},
            {"first_audio_ms_p99", Percentile(first_audio, 0.99)},
            {"pipeline_ms_p99", Percentile(pipeline, 0.99)},
            {"speculative_prefill_tokens_p50", Percentile(speculated_tokens, 0.5)},
            {"runs", first_audio.size()},
            {"failed_runs", failures}};
  }
};

absl::StatusOr<BenchReport> RunVoiceBench(const SuiteOptions& options) {
  BenchReport report("voice");
  const std::string bin = SelfDir();
  for (const char* b : {"router", "asr", "tts", "gateway"}) {
    if (!fs::exists(fs::path(bin) / b)) {
      return absl::FailedPreconditionError(absl::StrCat(b, " must be built beside moe"));
    }
  }
  ASSIGN_OR_RETURN(const Utterance utterance, LoadUtterance());
  // The small preset (the default model) unless a model is given; `--preset` is the engine
  // suites' (bench), not this one's.
  std::string model_dir = options.model_dir;
  if (model_dir.empty()) {
    model_dir = (fs::path(CacheDir(options)) / "voice-small" / "small").string();
    if (!fs::exists(fs::path(model_dir) / "config.json")) {
      model::MakeModelOptions make;
      make.preset = model::Preset::kSmall;
      RETURN_IF_ERROR(model::MakeModel(make, model_dir));
    }
  }
  const std::string model = fs::path(model_dir).filename().string();
  const int runs = options.quick ? 3 : 20;

  std::fprintf(stderr, "bench voice: starting router, asr, tts and two gateways\n");
  Supervisor group({.stop_grace = absl::Seconds(6), .output_fd = -1, .log = nullptr});
  const std::vector<std::string> grpc_ports = {
      "--set", "grpc.host=127.0.0.1",    "--set", "grpc.port=0",
      "--set", "metrics.host=127.0.0.1", "--set", "metrics.port=0"};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.end(), grpc_ports.begin(), grpc_ports.end());
    return a;
  };
  ASSIGN_OR_RETURN(const Supervisor::Member* router,
                   Start(group, "router", bin + "/router",
                         with({"--set", "core.model_dir=" + model_dir, "--set",
                               absl::StrCat("core.num_threads=", options.threads)})));
  ASSIGN_OR_RETURN(const Supervisor::Member* asr, Start(group, "asr", bin + "/asr", with({})));
  ASSIGN_OR_RETURN(
      const Supervisor::Member* tts,
      Start(group, "tts", bin + "/tts",
            with({"--set", absl::StrCat("core.first_chunk_max_chars=", kFirstChunkMaxChars)})));
  auto gateway = [&](const std::string& name, bool speculative) {
    return Start(
        group, name, bin + "/gateway",
        {"--set", "model_dir=" + model_dir, "--set", "http.host=127.0.0.1", "--set", "http.port=0",
         "--set", absl::StrCat("routing.routers=127.0.0.1:", *router->ports.grpc), "--set",
         absl::StrCat("voice.asr=127.0.0.1:", *asr->ports.grpc), "--set",
         absl::StrCat("voice.tts=127.0.0.1:", *tts->ports.grpc), "--set",
         absl::StrCat("voice.realtime.speculative_prefill=", speculative)});
  };
  ASSIGN_OR_RETURN(const Supervisor::Member* gw_on, gateway("gateway-speculative", true));
  ASSIGN_OR_RETURN(const Supervisor::Member* gw_off, gateway("gateway-plain", false));

  Series on, off;
  // One warm-up turn each (first connections, decoder and espeak start-up), then alternate.
  for (int i = -1; i < runs; ++i) {
    for (bool speculative : {true, false}) {
      const int port = *(speculative ? gw_on : gw_off)->ports.http;
      absl::StatusOr<Turn> t = TurnClient(port, model, utterance).Run();
      Series& s = speculative ? on : off;
      if (!t.ok()) {
        std::fprintf(stderr, "bench voice: run %d (%s) failed: %s\n", i,
                     speculative ? "speculative" : "plain",
                     std::string(t.status().message()).c_str());
        if (i >= 0) ++s.failures;
        continue;
      }
      if (i >= 0) s.Add(*t);
      std::fprintf(stderr, "bench voice: run %d %s first audio %.0f ms, pipeline %s ms\n", i,
                   speculative ? "speculative" : "plain", t->first_audio_ms,
                   t->timings.value("pipeline_ms", Json(-1)).dump().c_str());
    }
  }
  if (on.first_audio.empty() || off.first_audio.empty()) {
    return absl::InternalError("bench voice: no successful run in a mode");
  }
  const Json params = {{"preset", options.model_dir.empty() ? "small" : model},
                       {"speech", fs::path(kSpeech).filename().string()},
                       {"speech_end_s", utterance.speech_end_s},
                       {"endpoint_silence_ms", kEndpointMs},
                       {"tts_first_chunk_max_chars", kFirstChunkMaxChars},
                       {"chunk_ms", kChunkMs},
                       {"router_threads", options.threads},
                       {"speculative_prefill", true},
                       {"speculative", on.Breakdown()},
                       {"plain", off.Breakdown()}};
  if (!options.artifacts_dir.empty()) {
    // The per-stage medians of both modes, in pipeline order, for the stacked-bar plot
    // (bench/common/plots.cc: voice-stages.png).
    std::ofstream out(fs::path(options.artifacts_dir) / "voice-stages.dat");
    out << "# mode endpoint_wait_ms asr_final_ms prefill_ms first_sentence_ms "
           "tts_first_chunk_ms first_audio_ms (p50 of each)\n";
    for (const auto& [mode, s] : {std::pair<const char*, const Series*>{"speculative", &on},
                                  std::pair<const char*, const Series*>{"plain", &off}}) {
      out << mode << " " << Percentile(s->endpoint_wait, 0.5) << " "
          << Percentile(s->asr_final, 0.5) << " " << Percentile(s->prefill, 0.5) << " "
          << Percentile(s->first_sentence, 0.5) << " " << Percentile(s->tts_first_chunk, 0.5) << " "
          << Percentile(s->first_audio, 0.5) << "\n";
    }
  }
  auto add = [&](const std::string& name, const std::vector<double>& a,
                 const std::vector<double>& b, double p) {
    report.Add({.name = name,
                .value = Percentile(a, p),
                .unit = "ms",
                .params = params,
                .baseline = Baseline{name + "_speculative_prefill_off", Percentile(b, p)}});
  };
  add("voice_first_audio_ms_p50", on.first_audio, off.first_audio, 0.5);
  add("voice_first_audio_ms_p99", on.first_audio, off.first_audio, 0.99);
  add("voice_pipeline_ms_p50", on.pipeline, off.pipeline, 0.5);
  add("voice_pipeline_ms_p99", on.pipeline, off.pipeline, 0.99);
  return report;
}

}  // namespace

MOE_REGISTER_BENCH_SUITE("voice",
                         "realtime voice: end of speech -> first reply audio, p50/p99, per-stage "
                         "breakdown, speculative prefill on vs off",
                         RunVoiceBench);

}  // namespace moe::bench
