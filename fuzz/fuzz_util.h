// Helpers shared by the fuzzers: a per-process scratch file for loaders that take a path.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

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

}  // namespace moe::fuzz
