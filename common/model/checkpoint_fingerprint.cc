#include "common/model/checkpoint_fingerprint.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/file.h"

namespace moe::model {
namespace {

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

void UpdateU64(XXH3_state_t* state, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  XXH3_128bits_update(state, b, sizeof(b));
}

// Hashes bytes [offset, offset + len) of `fd` into `state`.
absl::Status HashRange(XXH3_state_t* state, int fd, int64_t offset, int64_t len,
                       const std::string& path, std::vector<char>& buf) {
  while (len > 0) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(len, static_cast<int64_t>(buf.size())));
    const ssize_t got = pread(fd, buf.data(), n, offset);
    if (got <= 0) {
      return absl::InternalError(absl::StrCat("reading ", path, " at ", offset, ": ",
                                              got == 0 ? "unexpected end" : std::strerror(errno)));
    }
    XXH3_128bits_update(state, buf.data(), static_cast<size_t>(got));
    offset += got;
    len -= got;
  }
  return absl::OkStatus();
}

absl::Status HashFile(XXH3_state_t* state, const std::filesystem::path& path) {
  const std::string p = path.string();
  const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat("cannot open ", p, ": ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  const int64_t size = lseek(fd, 0, SEEK_END);
  if (size < 0) return absl::InternalError(absl::StrCat("cannot size ", p));
  const std::string name = path.filename().string();
  UpdateU64(state, name.size());
  XXH3_128bits_update(state, name.data(), name.size());
  UpdateU64(state, static_cast<uint64_t>(size));
  std::vector<char> buf(1 << 20);
  if (size <= kFullHashBytes) return HashRange(state, fd, 0, size, p, buf);
  // The safetensors header: u64le length, then that many bytes of JSON.
  uint8_t len_bytes[8];
  if (pread(fd, len_bytes, 8, 0) != 8) return absl::InternalError(absl::StrCat("reading ", p));
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  const int64_t data_begin = std::min<int64_t>(size, 8 + static_cast<int64_t>(header_len));
  if (absl::Status s = HashRange(state, fd, 0, data_begin, p, buf); !s.ok()) return s;
  for (int64_t off = data_begin; off < size; off += kSampleStride) {
    if (absl::Status s = HashRange(state, fd, off, std::min(kSampleBytes, size - off), p, buf);
        !s.ok()) {
      return s;
    }
  }
  const int64_t tail = std::max(data_begin, size - kSampleBytes);
  return HashRange(state, fd, tail, size - tail, p, buf);
}

}  // namespace

absl::StatusOr<std::string> CheckpointFingerprint(const std::string& model_dir) {
  namespace fs = std::filesystem;
  absl::StatusOr<std::string> config =
      common::ReadFile((fs::path(model_dir) / "config.json").string());
  if (!config.ok()) return config.status();
  std::vector<fs::path> files;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(model_dir, ec)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  if (ec) return absl::NotFoundError(absl::StrCat("cannot list ", model_dir, ": ", ec.message()));
  if (files.empty()) return absl::NotFoundError(absl::StrCat("no *.safetensors in ", model_dir));
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });

  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  XXH3_128bits_reset(state.get());
  constexpr std::string_view kTag = "moe.ckpt.v1";
  XXH3_128bits_update(state.get(), kTag.data(), kTag.size());
  UpdateU64(state.get(), config->size());
  XXH3_128bits_update(state.get(), config->data(), config->size());
  for (const fs::path& f : files) {
    if (absl::Status s = HashFile(state.get(), f); !s.ok()) return s;
  }
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state.get()));
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[2 * i] = kDigits[canonical.digest[i] >> 4];
    out[2 * i + 1] = kDigits[canonical.digest[i] & 0xf];
  }
  return out;
}

}  // namespace moe::model
