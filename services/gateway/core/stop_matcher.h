// Stop-string matching over streamed text. Text arrives in pieces (incremental detokenization);
// a stop string may span pieces. The matcher holds back exactly the text that could still become
// the start of a stop string, so nothing after a stop string is ever released.
//
//   StopMatcher m({"\n\n", "END"}, /*include_stop=*/false);
//   StopMatcher::Result r = m.Add(delta);   // r.text is safe to send; r.stopped ends the stream
//   ... m.Flush() at the end of the stream releases what was held back.
//
// Input must be valid UTF-8 in whole characters (what IncrementalDetokenizer emits); released
// text then is too. Not thread-safe; one per sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moe::gateway {

class StopMatcher {
 public:
  struct Result {
    std::string text;      // text to release now
    bool stopped = false;  // a stop string was found; text ends before it (or with it)
  };

  // Empty strings in `stops` are ignored.
  StopMatcher(std::vector<std::string> stops, bool include_stop);

  // Adds text. After a stop, further calls return nothing.
  Result Add(std::string_view text);
  // Releases held-back text (no stop string can complete any more).
  std::string Flush();

  bool stopped() const { return stopped_; }
  // The stop string that matched, "" before that.
  const std::string& matched() const { return matched_; }
  size_t held_bytes() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  bool include_stop_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace moe::gateway
