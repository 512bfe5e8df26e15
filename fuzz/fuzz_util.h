// Helpers shared by the fuzzers: per-process scratch files and directories, stream framing.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace moe::fuzz {

// Writes `data` to a file private to this process (in /dev/shm when writable: no disk I/O per
// execution) and returns its path (rewritten each call).
inline const std::string& WriteScratch(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path =
      std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/moe_fuzz_" +
      std::to_string(::getpid()) + std::string(suffix);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// A directory private to this process (in /dev/shm when writable), made once; for a tiny model
// checkpoint written at the first input.
inline const std::string& ScratchDir(const char* name) {
  static const std::string dir = [name] {
    std::string d = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                    "/moe_fuzz_" + name + "_XXXXXX";
    if (::mkdtemp(d.data()) == nullptr) std::abort();
    return d;
  }();
  return dir;
}

// Splits `data` into the messages of a stream, each a varint length then that many bytes (how
// the stream fuzzers' seeds are written: scripts/fuzz-seeds). A length past the end takes the
// rest; at most `max_messages`.
inline std::vector<std::string_view> SplitDelimited(const uint8_t* data, size_t size,
                                                    size_t max_messages = 64) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < size && out.size() < max_messages) {
    uint64_t len = 0;
    int shift = 0;
    while (at < size && shift < 63) {
      const uint8_t b = data[at++];
      len |= uint64_t{b & 0x7fu} << shift;
      shift += 7;
      if ((b & 0x80) == 0) break;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, size - at));
    out.emplace_back(reinterpret_cast<const char*>(data) + at, n);
    at += n;
  }
  return out;
}

// Silences protobuf's log lines (a mutated request with invalid UTF-8 in a string field logs one
// per parse): call once, from LLVMFuzzerInitialize, in the proto fuzzers.
#define MOE_FUZZ_QUIET_PROTOBUF()                      \
  extern "C" int LLVMFuzzerInitialize(int*, char***) { \
    ::google::protobuf::SetLogHandler(nullptr);        \
    return 0;                                          \
  }

}  // namespace moe::fuzz
