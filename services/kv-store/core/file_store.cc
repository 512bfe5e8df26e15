#include "services/kv-store/core/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace moe::kv_store {
namespace {

namespace fs = std::filesystem;

// The most elements an entry's dims may describe (2^40: far beyond any KV block).
constexpr int64_t kMaxEntryElements = int64_t{1} << 40;
constexpr char kBlockMagic[8] = {'M', 'O', 'E', 'K', 'V', 'B', 1, 0};
constexpr char kResponseMagic[8] = {'M', 'O', 'E', 'R', 'S', 'P', 1, 0};
constexpr size_t kHeaderChecked = 144;

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

absl::StatusOr<kv::BlockHash> KeyFromName(std::string_view stem) {
  return kv::BlockHash::FromHex(stem);
}

kv::BlockHash KeyFromBytes(const uint8_t* p) {
  kv::BlockHash h;
  for (int i = 0; i < 8; ++i) h.hi = (h.hi << 8) | p[i];
  for (int i = 8; i < 16; ++i) h.lo = (h.lo << 8) | p[i];
  return h;
}

std::atomic<uint64_t> g_tmp_counter{0};

}  // namespace

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Open(const std::string& dir, Kind kind,
                                                           std::vector<FoundEntry>* found) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  std::unique_ptr<FileStore> store(new FileStore(dir, kind));
  const std::string ext(store->ext());
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (name.find(".tmp.") != std::string::npos) {
      fs::remove(p, ec);  // a write a crash interrupted
      ec.clear();
      continue;
    }
    if (p.extension() != ext) continue;
    absl::StatusOr<kv::BlockHash> key = KeyFromName(p.stem().string());
    if (!key.ok()) continue;
    struct stat st;
    if (stat(p.c_str(), &st) != 0) continue;
    if (found != nullptr) {
      found->push_back(
          {*key, static_cast<int64_t>(st.st_size), absl::TimeFromTimespec(st.st_mtim)});
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  return store;
}

std::string FileStore::PathOf(const kv::BlockHash& key) const {
  const std::string hex = key.ToHex();
  return absl::StrCat(dir_, "/", hex.substr(0, 2), "/", hex, std::string(ext()));
}

absl::StatusOr<int64_t> FileStore::Write(const kv::BlockHash& key, const EntryMeta& meta,
                                         std::string_view payload) {
  if (meta.dims.size() > static_cast<size_t>(kMaxDims)) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxDims, " dims"));
  }
  uint8_t header[kFileHeaderBytes] = {};
  std::memcpy(header, kind_ == Kind::kBlocks ? kBlockMagic : kResponseMagic, 8);
  PutU32(header + 8, kFileHeaderBytes);
  PutU32(header + 12, static_cast<uint32_t>(meta.codec));
  const std::array<uint8_t, 16> kb = key.CanonicalBytes();
  std::memcpy(header + 16, kb.data(), 16);
  PutU32(header + 32, static_cast<uint32_t>(meta.dtype));
  PutU32(header + 36, static_cast<uint32_t>(meta.dims.size()));
  for (size_t i = 0; i < meta.dims.size(); ++i) {
    PutU64(header + 40 + 8 * i, static_cast<uint64_t>(meta.dims[i]));
  }
  PutU64(header + 104, static_cast<uint64_t>(meta.raw_bytes));
  PutU64(header + 112, payload.size());
  PutU64(header + 120, meta.raw_checksum);
  PutU64(header + 128, XXH3_64bits(payload.data(), payload.size()));
  PutU64(header + 144, XXH3_64bits(header, kHeaderChecked));

  const std::string path = PathOf(key);
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid(), ".", g_tmp_counter.fetch_add(1));
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  auto write_all = [fd](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = write(fd, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  };
  const bool ok = write_all(header, sizeof(header)) && write_all(payload.data(), payload.size());
  const int saved_errno = errno;
  if (close(fd) != 0 || !ok) {
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("writing ", tmp, ": ", std::strerror(saved_errno)));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("renaming ", tmp, ": ", std::strerror(e)));
  }
  return static_cast<int64_t>(sizeof(header) + payload.size());
}

absl::StatusOr<ReadEntry> FileStore::Read(const kv::BlockHash& key) const {
  const std::string path = PathOf(key);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no ", path));
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::InternalError(absl::StrCat("cannot stat ", path));
  auto file = std::make_shared<std::string>();
  file->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < file->size()) {
    const ssize_t got =
        pread(fd, file->data() + done, file->size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      return absl::InternalError(absl::StrCat("reading ", path, ": ", std::strerror(errno)));
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  file->resize(done);
  auto corrupt = [&](const char* what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  if (file->size() < static_cast<size_t>(kFileHeaderBytes)) return corrupt("shorter than a header");
  const uint8_t* h = reinterpret_cast<const uint8_t*>(file->data());
  if (GetU64(h + 144) != XXH3_64bits(h, kHeaderChecked)) return corrupt("header checksum");
  if (std::memcmp(h, kind_ == Kind::kBlocks ? kBlockMagic : kResponseMagic, 8) != 0) {
    return corrupt("magic");
  }
  if (GetU32(h + 8) != kFileHeaderBytes) return corrupt("header size");
  if (KeyFromBytes(h + 16) != key) return corrupt("key");
  ReadEntry out;
  const uint32_t codec = GetU32(h + 12);
  const uint32_t dtype = GetU32(h + 32);
  const uint32_t num_dims = GetU32(h + 36);
  if (codec > 2 || dtype > 2 || num_dims > kMaxDims) return corrupt("codec, dtype or dims");
  out.meta.codec = static_cast<Codec>(codec);
  out.meta.dtype = static_cast<common::DType>(dtype);
  // Dims and sizes are used as sizes by the caller: none negative, and the element count
  // bounded (a crafted header, with its checksum recomputed, must not overflow it; the
  // kv_store_wire_fuzzer found that).
  int64_t elements = 1;
  for (uint32_t i = 0; i < num_dims; ++i) {
    const int64_t d = static_cast<int64_t>(GetU64(h + 40 + 8 * i));
    if (d < 0 || __builtin_mul_overflow(elements, d, &elements) || elements > kMaxEntryElements) {
      return corrupt("dims");
    }
    out.meta.dims.push_back(d);
  }
  out.meta.raw_bytes = static_cast<int64_t>(GetU64(h + 104));
  if (out.meta.raw_bytes < 0) return corrupt("raw size");
  out.meta.raw_checksum = GetU64(h + 120);
  const uint64_t payload_bytes = GetU64(h + 112);
  if (payload_bytes != file->size() - kFileHeaderBytes) return corrupt("payload size");
  const char* payload = file->data() + kFileHeaderBytes;
  if (GetU64(h + 128) != XXH3_64bits(payload, payload_bytes)) return corrupt("payload checksum");
  out.payload_offset = kFileHeaderBytes;
  out.payload_bytes = payload_bytes;
  out.file = std::move(file);
  return out;
}

void FileStore::Remove(const kv::BlockHash& key) { unlink(PathOf(key).c_str()); }

}  // namespace moe::kv_store
