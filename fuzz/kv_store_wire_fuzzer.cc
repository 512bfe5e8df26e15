// The kv-store's two parsers of bytes from outside the process:
//   mode 0: kv_block_wire's streaming GetResponse reader (what a router does with a Get answer),
//           over the input cut into up to 8 slices (gRPC hands it fragments), with a sink that
//           checks the reader's contract (data in order, covering each accepted block once);
//   mode 1: FileStore::Read of the input as an L3 block file, then what the core does with it
//           (layout check, DecodeBlock);
//   mode 2: as 1, with the header's key and checksums fixed up first, so the fuzzer gets past
//           them to the sizes, dims and codecs (a file torn so that its checksums still match,
//           or written by someone else).
// Input: byte 0 = mode, byte 1 = slice cuts (mode 0), the rest = the bytes.
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "services/kv-store/core/file_store.h"
#include "services/kv-store/core/kv_codec.h"
#include "services/kv-store/kv_block_wire.h"

namespace {

using moe::kv_store::FileStore;

#define FUZZ_CHECK(c)       \
  do {                      \
    if (!(c)) std::abort(); \
  } while (0)

class CheckingSink final : public moe::kv_store::WireBlockSink {
 public:
  bool BeginBlock(const moe::kv::BlockHash&, moe::common::DType, std::span<const int64_t> dims,
                  int64_t num_bytes, int) override {
    FUZZ_CHECK(!open_);
    FUZZ_CHECK(num_bytes >= 0);
    (void)dims;
    if (num_bytes > (1 << 20)) return false;  // as a router refuses a block of another shape
    open_ = true;
    expected_ = num_bytes;
    next_ = 0;
    return true;
  }
  void BlockData(int64_t offset, const uint8_t* data, size_t size) override {
    FUZZ_CHECK(open_);
    FUZZ_CHECK(offset == next_);
    FUZZ_CHECK(offset + static_cast<int64_t>(size) <= expected_);
    if (size > 0) sum_ += data[0] + data[size - 1];  // touch the bytes (ASan checks them)
    next_ += static_cast<int64_t>(size);
  }
  void EndBlock(bool intact) override {
    FUZZ_CHECK(open_);
    // An intact block was covered exactly.
    if (intact) FUZZ_CHECK(next_ == expected_);
    open_ = false;
  }

 private:
  bool open_ = false;
  int64_t expected_ = 0;
  int64_t next_ = 0;
  uint64_t sum_ = 0;
};

void FuzzWire(uint8_t cuts, const uint8_t* data, size_t size) {
  std::vector<grpc::Slice> slices;
  const int n = 1 + (cuts & 7);
  size_t at = 0;
  for (int i = 0; i < n && at < size; ++i) {
    size_t len =
        i == n - 1 ? size - at : std::min(size - at, size_t{1} + ((cuts * 37u + i * 11u) % 97));
    slices.emplace_back(data + at, len);
    at += len;
  }
  if (at < size) slices.emplace_back(data + at, size - at);
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  CheckingSink sink;
  (void)moe::kv_store::ParseGetResponse(buffer, sink);
}

struct Store {
  std::string dir;
  std::unique_ptr<FileStore> files;
  moe::kv::BlockHash key{0x0123456789abcdefull, 0xfedcba9876543210ull};
  std::string path;
};

Store& TheStore() {
  static Store* s = [] {
    auto* st = new Store;
    st->dir = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/moe_fuzz_kv_" +
              std::to_string(::getpid());
    std::vector<moe::kv_store::FoundEntry> found;
    auto opened = FileStore::Open(st->dir, FileStore::Kind::kBlocks, &found);
    if (!opened.ok()) std::abort();
    st->files = std::move(*opened);
    st->path = st->files->PathForTesting(st->key);
    std::filesystem::create_directories(std::filesystem::path(st->path).parent_path());
    return st;
  }();
  return *s;
}

void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void FuzzFile(bool fix_up, const uint8_t* data, size_t size) {
  Store& st = TheStore();
  std::string file(reinterpret_cast<const char*>(data), size);
  if (fix_up) {
    constexpr size_t kH = moe::kv_store::kFileHeaderBytes;
    if (file.size() < kH) file.resize(kH, '\0');
    uint8_t* h = reinterpret_cast<uint8_t*>(file.data());
    std::memcpy(h, "MOEKVB\1\0", 8);
    h[8] = static_cast<uint8_t>(kH);
    h[9] = h[10] = h[11] = 0;
    const std::array<uint8_t, 16> kb = st.key.CanonicalBytes();
    std::memcpy(h + 16, kb.data(), 16);
    PutU64(h + 112, file.size() - kH);
    PutU64(h + 128, XXH3_64bits(file.data() + kH, file.size() - kH));
    PutU64(h + 144, XXH3_64bits(h, 144));
  }
  std::ofstream(st.path, std::ios::binary | std::ios::trunc).write(file.data(), file.size());
  auto read = st.files->Read(st.key);
  if (!read.ok()) return;
  // What KvStoreCore does with an L3 hit.
  const moe::kv_store::BlockLayout layout{read->meta.dtype, read->meta.dims};
  if (layout.num_bytes() != read->meta.raw_bytes) return;
  FUZZ_CHECK(read->meta.raw_bytes >= 0);
  if (read->meta.raw_bytes > (64 << 20)) return;  // the fuzzer's memory, not a finding
  std::string out(static_cast<size_t>(read->meta.raw_bytes), '\0');
  (void)moe::kv_store::DecodeBlock(read->meta.codec, layout, read->payload(),
                                   {reinterpret_cast<uint8_t*>(out.data()), out.size()});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  switch (data[0] % 3) {
    case 0:
      FuzzWire(data[1], data + 2, size - 2);
      break;
    case 1:
      FuzzFile(false, data + 2, size - 2);
      break;
    default:
      FuzzFile(true, data + 2, size - 2);
      break;
  }
  return 0;
}
