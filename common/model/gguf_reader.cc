#include "common/model/gguf_reader.h"

#include <cstring>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/base/file.h"
#include "common/base/status_macros.h"

namespace moe::model::gguf {
namespace {

// A bounds-checked little-endian cursor over a byte buffer.
class Reader {
 public:
  Reader(const std::string& data, std::string path) : data_(data), path_(std::move(path)) {}

  template <typename T>
  absl::StatusOr<T> Get() {
    if (pos_ + sizeof(T) > data_.size()) return Truncated();
    T v;
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  absl::StatusOr<std::string> GetString() {
    ASSIGN_OR_RETURN(uint64_t n, Get<uint64_t>());
    if (n > data_.size() - pos_) return Truncated();
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }

 private:
  absl::Status Truncated() const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": truncated GGUF header at byte ", pos_));
  }
  const std::string& data_;
  std::string path_;
  size_t pos_ = 0;
};

using Scalar = std::variant<uint64_t, int64_t, double, bool, std::string>;

absl::StatusOr<Scalar> ReadScalar(Reader& r, ValueType t) {
  switch (t) {
    case ValueType::kUint8: {
      ASSIGN_OR_RETURN(uint8_t v, r.Get<uint8_t>());
      return Scalar(uint64_t{v});
    }
    case ValueType::kInt8: {
      ASSIGN_OR_RETURN(int8_t v, r.Get<int8_t>());
      return Scalar(int64_t{v});
    }
    case ValueType::kUint16: {
      ASSIGN_OR_RETURN(uint16_t v, r.Get<uint16_t>());
      return Scalar(uint64_t{v});
    }
    case ValueType::kInt16: {
      ASSIGN_OR_RETURN(int16_t v, r.Get<int16_t>());
      return Scalar(int64_t{v});
    }
    case ValueType::kUint32: {
      ASSIGN_OR_RETURN(uint32_t v, r.Get<uint32_t>());
      return Scalar(uint64_t{v});
    }
    case ValueType::kInt32: {
      ASSIGN_OR_RETURN(int32_t v, r.Get<int32_t>());
      return Scalar(int64_t{v});
    }
    case ValueType::kUint64: {
      ASSIGN_OR_RETURN(uint64_t v, r.Get<uint64_t>());
      return Scalar(v);
    }
    case ValueType::kInt64: {
      ASSIGN_OR_RETURN(int64_t v, r.Get<int64_t>());
      return Scalar(v);
    }
    case ValueType::kFloat32: {
      ASSIGN_OR_RETURN(float v, r.Get<float>());
      return Scalar(double{v});
    }
    case ValueType::kFloat64: {
      ASSIGN_OR_RETURN(double v, r.Get<double>());
      return Scalar(v);
    }
    case ValueType::kBool: {
      ASSIGN_OR_RETURN(uint8_t v, r.Get<uint8_t>());
      return Scalar(v != 0);
    }
    case ValueType::kString: {
      ASSIGN_OR_RETURN(std::string v, r.GetString());
      return Scalar(std::move(v));
    }
    case ValueType::kArray:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown GGUF value type ", static_cast<uint32_t>(t)));
}

}  // namespace

absl::StatusOr<FileInfo> ReadGgufHeader(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string data, common::ReadFile(path));
  Reader r(data, path);
  FileInfo info;
  info.file_size = data.size();
  if (data.size() < 4 || data.compare(0, 4, "GGUF") != 0) {
    return absl::InvalidArgumentError(path + ": not a GGUF file (bad magic)");
  }
  RETURN_IF_ERROR(r.Get<uint32_t>().status());  // magic
  ASSIGN_OR_RETURN(info.version, r.Get<uint32_t>());
  ASSIGN_OR_RETURN(uint64_t n_tensors, r.Get<uint64_t>());
  ASSIGN_OR_RETURN(uint64_t n_kv, r.Get<uint64_t>());
  for (uint64_t i = 0; i < n_kv; ++i) {
    ASSIGN_OR_RETURN(std::string key, r.GetString());
    ASSIGN_OR_RETURN(uint32_t t, r.Get<uint32_t>());
    Value v;
    v.type = static_cast<ValueType>(t);
    if (v.type == ValueType::kArray) {
      ASSIGN_OR_RETURN(uint32_t at, r.Get<uint32_t>());
      v.array_type = static_cast<ValueType>(at);
      ASSIGN_OR_RETURN(uint64_t n, r.Get<uint64_t>());
      if (n > data.size()) return absl::InvalidArgumentError(path + ": bad array length");
      for (uint64_t j = 0; j < n; ++j) {
        ASSIGN_OR_RETURN(Scalar s, ReadScalar(r, v.array_type));
        v.array.push_back(std::move(s));
      }
    } else {
      ASSIGN_OR_RETURN(v.scalar, ReadScalar(r, v.type));
    }
    if (!info.metadata.emplace(key, std::move(v)).second) {
      return absl::InvalidArgumentError(path + ": duplicate key " + key);
    }
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorEntry e;
    ASSIGN_OR_RETURN(e.name, r.GetString());
    ASSIGN_OR_RETURN(uint32_t nd, r.Get<uint32_t>());
    if (nd == 0 || nd > 4) return absl::InvalidArgumentError(path + ": bad n_dims of " + e.name);
    // The element count must fit in the file: checked per dimension so that the product (and
    // TensorEntry::nbytes) cannot overflow (found by fuzz/gguf_fuzzer).
    uint64_t elements = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      ASSIGN_OR_RETURN(uint64_t x, r.Get<uint64_t>());
      if (x != 0 && elements > info.file_size / x) {
        return absl::InvalidArgumentError(path + ": tensor " + e.name + " is larger than the file");
      }
      elements *= x;
      e.ne.push_back(static_cast<int64_t>(x));
    }
    ASSIGN_OR_RETURN(uint32_t type, r.Get<uint32_t>());
    if (type != static_cast<uint32_t>(GgmlType::kF32) &&
        type != static_cast<uint32_t>(GgmlType::kF16) &&
        type != static_cast<uint32_t>(GgmlType::kBF16)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", e.name, " has unsupported ggml type ", type));
    }
    e.type = static_cast<GgmlType>(type);
    ASSIGN_OR_RETURN(e.offset, r.Get<uint64_t>());
    info.tensors.push_back(std::move(e));
  }
  uint64_t align = kAlignment;
  if (auto it = info.metadata.find("general.alignment"); it != info.metadata.end()) {
    if (!std::holds_alternative<uint64_t>(it->second.scalar)) {  // an int, string, array...
      return absl::InvalidArgumentError(path + ": general.alignment is not an unsigned integer");
    }
    align = it->second.u();
    if (align == 0 || align > (1u << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": general.alignment ", align, " is not in [1, 2^20]"));
    }
  }
  info.data_offset = (r.pos() + align - 1) / align * align;
  for (const TensorEntry& e : info.tensors) {
    if (e.offset % align != 0 || e.offset > info.file_size ||
        info.data_offset + e.offset + static_cast<uint64_t>(e.nbytes()) > info.file_size) {
      return absl::InvalidArgumentError(path + ": tensor " + e.name + " misaligned or truncated");
    }
  }
  return info;
}

}  // namespace moe::model::gguf
