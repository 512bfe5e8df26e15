#include "common/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace moe::model {
namespace {

using nlohmann::json;

constexpr int64_t kMaxHeaderBytes = 100 << 20;  // the safetensors library's limit
constexpr int64_t kMaxElements = int64_t{1} << 48;

// Element sizes of every dtype the format defines (we read only F32/BF16/F16).
int64_t ElementSize(std::string_view dtype) {
  static const std::map<std::string_view, int64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

absl::Status Bad(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::string(what)));
}

absl::Status BadTensor(const std::string& path, std::string_view tensor, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": tensor '", std::string(tensor), "': ", std::string(what)));
}

// The file mapped read-only at a 2 MiB-aligned address with MADV_HUGEPAGE, so that where the
// page cache holds the file in 2 MiB folios (ext4 and tmpfs make them on readahead of such a
// mapping, Linux >= 6.16 for ext4) the weights are mapped by PMD entries: one TLB entry per
// 2 MiB instead of 512. Nothing is copied; on kernels or file systems without large folios this
// is an ordinary mapping. MAP_FAILED (errno set) on failure.
void* MapHugePageAligned(int fd, size_t size) {
  constexpr size_t kHuge = size_t{2} << 20;
  // Reserve size + 2 MiB of address space, map the file over its aligned part, return the rest.
  void* res = ::mmap(nullptr, size + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (res == MAP_FAILED) return MAP_FAILED;
  const auto lo = reinterpret_cast<uintptr_t>(res);
  const uintptr_t aligned = (lo + kHuge - 1) & ~(kHuge - 1);
  void* m =
      ::mmap(reinterpret_cast<void*>(aligned), size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
  if (m == MAP_FAILED) {
    const int err = errno;
    ::munmap(res, size + kHuge);
    errno = err;
    return MAP_FAILED;
  }
  if (aligned > lo) ::munmap(res, aligned - lo);
  const uintptr_t end = aligned + size, res_end = lo + size + kHuge;
  if (res_end > end) ::munmap(reinterpret_cast<void*>(end), res_end - end);
  ::madvise(m, size, MADV_HUGEPAGE);  // advice only: failure (no THP) changes nothing
  return m;
}

}  // namespace

std::string_view SafetensorsDtypeName(common::DType dtype) {
  switch (dtype) {
    case common::DType::kF32:
      return "F32";
    case common::DType::kBF16:
      return "BF16";
    case common::DType::kF16:
      return "F16";
    case common::DType::kQ8_0:  // made on load, never in a file
      return "Q8_0";
  }
  return "?";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t TensorSpec::nbytes() const {
  int64_t n = common::DTypeSize(dtype);
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": fstat: ", std::strerror(err)));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_ = st.st_size;
  if (file->size_ > 0) {
    void* m = MapHugePageAligned(fd, static_cast<size_t>(file->size_));
    if (m == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(err)));
    }
    file->map_ = m;
  }
  ::close(fd);

  const int64_t size = file->size_;
  const auto* base = static_cast<const uint8_t*>(file->map_);
  if (size < 8) {
    return Bad(path, absl::StrCat("truncated file: ", size,
                                  " bytes, shorter than the 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];
  if (n > static_cast<uint64_t>(size - 8)) {
    return Bad(path, absl::StrCat("header length ", n, " runs past the end of the file (", size,
                                  " bytes)"));
  }
  if (static_cast<int64_t>(n) > kMaxHeaderBytes) {
    return Bad(path, absl::StrCat("header length ", n, " exceeds the 100 MiB limit"));
  }
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_size = size - data_start;
  json header = json::parse(base + 8, base + data_start, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Bad(path, "header is not a JSON object");
  }

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Bad(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return Bad(path, "__metadata__ values must be strings");
        file->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) return BadTensor(path, name, "entry is not an object");
    TensorInfo t;
    t.name = name;
    if (!v.contains("dtype") || !v["dtype"].is_string()) {
      return BadTensor(path, name, "missing dtype");
    }
    t.dtype_name = v["dtype"].get<std::string>();
    const int64_t esize = ElementSize(t.dtype_name);
    if (esize == 0)
      return BadTensor(path, name, absl::StrCat("unknown dtype '", t.dtype_name, "'"));
    for (common::DType d : {common::DType::kF32, common::DType::kBF16, common::DType::kF16}) {
      if (SafetensorsDtypeName(d) == t.dtype_name) {
        t.dtype_supported = true;
        t.dtype = d;
      }
    }
    if (!v.contains("shape") || !v["shape"].is_array()) {
      return BadTensor(path, name, "missing shape");
    }
    int64_t numel = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return BadTensor(path, name, absl::StrCat("bad shape ", v["shape"].dump()));
      }
      t.shape.push_back(d.get<int64_t>());
      numel = t.shape.back() == 0 ? 0 : numel * t.shape.back();
      if (numel > kMaxElements) return BadTensor(path, name, "shape is too large");
    }
    const json& off = v.contains("data_offsets") ? v["data_offsets"] : json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      return BadTensor(path, name, "data_offsets must be [begin, end] (non-negative integers)");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (end < begin) {
      return BadTensor(path, name,
                       absl::StrCat("data_offsets [", begin, ", ", end, "] end before begin"));
    }
    const int64_t expect = numel * esize;
    if (end - begin != static_cast<uint64_t>(expect)) {
      return BadTensor(
          path, name,
          absl::StrCat("shape ", t.ShapeString(), " of ", t.dtype_name, " needs ", expect,
                       " bytes but data_offsets [", begin, ", ", end, "] span ", end - begin));
    }
    t.file_offset = data_start + static_cast<int64_t>(begin);
    t.nbytes = expect;
    file->tensors_.push_back(std::move(t));
  }

  std::sort(
      file->tensors_.begin(), file->tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
        return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.nbytes < b.nbytes;
      });
  // Range: a file whose tensors tile the data section without holes but end past the end of
  // the file was cut short; anything else past the end is an out-of-range offset.
  int64_t contiguous_end = data_start;
  bool contiguous = true;
  for (const TensorInfo& t : file->tensors_) {
    if (t.file_offset != contiguous_end) contiguous = false;
    contiguous_end = t.file_offset + t.nbytes;
  }
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : file->tensors_) {
    const int64_t begin = t.file_offset - data_start, end = begin + t.nbytes;
    if (end > data_size) {
      if (contiguous) {
        return BadTensor(path, t.name,
                         absl::StrCat("truncated file: the tensor needs data bytes [", begin, ", ",
                                      end, ") but the data section holds only ", data_size,
                                      " bytes (file is ", size, " bytes)"));
      }
      return BadTensor(
          path, t.name,
          absl::StrCat("data_offsets [", begin, ", ", end,
                       ") out of range: the data section holds ", data_size, " bytes"));
    }
    if (prev != nullptr && t.nbytes > 0 && prev->file_offset + prev->nbytes > t.file_offset) {
      return BadTensor(
          path, t.name,
          absl::StrCat("data_offsets [", begin, ", ", end, ") overlap tensor '", prev->name, "'"));
    }
    if (t.nbytes > 0) prev = &t;
  }
  for (TensorInfo& t : file->tensors_) t.data = base + t.file_offset;
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->by_name_[file->tensors_[i].name] = i;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, static_cast<size_t>(size_));
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::Prefetch(const TensorInfo& t) const {
  if (t.nbytes == 0) return;
  const long page = ::sysconf(_SC_PAGESIZE);
  auto addr = reinterpret_cast<uintptr_t>(t.data);
  uintptr_t start = addr - addr % static_cast<uintptr_t>(page);
  ::madvise(reinterpret_cast<void*>(start), addr + static_cast<uintptr_t>(t.nbytes) - start,
            MADV_WILLNEED);
}

std::string SafetensorsHeaderJson(const std::vector<TensorSpec>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    const int64_t n = t.nbytes();
    header[t.name] = {{"dtype", SafetensorsDtypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  return header.dump();
}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, std::vector<TensorSpec> tensors,
    const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> names;
  for (const TensorSpec& t : tensors) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  for (size_t i = 1; i < names.size(); ++i) {
    if (names[i] == names[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": duplicate tensor '", names[i], "'"));
    }
  }
  std::string header = SafetensorsHeaderJson(tensors, metadata);
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  for (const TensorSpec& t : tensors) w->total_ += t.nbytes();
  w->f_ = std::fopen(path.c_str(), "wb");
  if (w->f_ == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  uint8_t len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  if (std::fwrite(len, 1, 8, w->f_) != 8 ||
      std::fwrite(header.data(), 1, header.size(), w->f_) != header.size()) {
    return absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
  }
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

absl::Status SafetensorsWriter::Append(const void* data, int64_t nbytes) {
  if (f_ == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(path_, ": already finished"));
  if (nbytes < 0 || written_ + nbytes > total_) {
    return absl::OutOfRangeError(
        absl::StrCat(path_, ": appending ", nbytes, " bytes exceeds the ", total_, " declared"));
  }
  if (nbytes > 0 &&
      std::fwrite(data, 1, static_cast<size_t>(nbytes), f_) != static_cast<size_t>(nbytes)) {
    return absl::InternalError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  written_ += nbytes;
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Finish() {
  if (f_ == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(path_, ": already finished"));
  if (written_ != total_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": wrote ", written_, " of ", total_, " declared data bytes"));
  }
  int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0)
    return absl::InternalError(absl::StrCat(path_, ": close failed: ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                              const std::vector<const void*>& data,
                              const std::map<std::string, std::string>& metadata) {
  if (data.size() != tensors.size()) {
    return absl::InvalidArgumentError("WriteSafetensors: one data pointer per tensor");
  }
  auto w = SafetensorsWriter::Create(path, tensors, metadata);
  if (!w.ok()) return w.status();
  for (size_t i = 0; i < tensors.size(); ++i) {
    absl::Status s = (*w)->Append(data[i], tensors[i].nbytes());
    if (!s.ok()) return s;
  }
  return (*w)->Finish();
}

}  // namespace moe::model
