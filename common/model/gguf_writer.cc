#include "common/model/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "common/base/status_macros.h"

namespace moe::model::gguf {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

uint64_t AlignUp(uint64_t x) { return (x + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void GgufWriter::AddUint32(const std::string& key, uint32_t v) {
  keys_.push_back(key);
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kUint32));
  Put<uint32_t>(&kvs_, v);
}
void GgufWriter::AddInt32(const std::string& key, int32_t v) {
  keys_.push_back(key);
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kInt32));
  Put<int32_t>(&kvs_, v);
}
void GgufWriter::AddUint64(const std::string& key, uint64_t v) {
  keys_.push_back(key);
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kUint64));
  Put<uint64_t>(&kvs_, v);
}
void GgufWriter::AddFloat32(const std::string& key, float v) {
  keys_.push_back(key);
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kFloat32));
  Put<float>(&kvs_, v);
}
void GgufWriter::AddBool(const std::string& key, bool v) {
  keys_.push_back(key);
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kBool));
  Put<uint8_t>(&kvs_, v ? 1 : 0);
}
void GgufWriter::AddString(const std::string& key, const std::string& v) {
  keys_.push_back(key);
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kString));
  PutString(&kvs_, v);
}
void GgufWriter::AddStringArray(const std::string& key, const std::vector<std::string>& v) {
  keys_.push_back(key);
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kArray));
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kString));
  Put<uint64_t>(&kvs_, v.size());
  for (const std::string& s : v) PutString(&kvs_, s);
}
void GgufWriter::AddFloat32Array(const std::string& key, const std::vector<float>& v) {
  keys_.push_back(key);
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kArray));
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kFloat32));
  Put<uint64_t>(&kvs_, v.size());
  for (float f : v) Put<float>(&kvs_, f);
}
void GgufWriter::AddInt32Array(const std::string& key, const std::vector<int32_t>& v) {
  keys_.push_back(key);
  PutString(&kvs_, key);
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kArray));
  Put<uint32_t>(&kvs_, static_cast<uint32_t>(ValueType::kInt32));
  Put<uint64_t>(&kvs_, v.size());
  for (int32_t x : v) Put<int32_t>(&kvs_, x);
}

void GgufWriter::AddTensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                           TensorFill fill) {
  TensorEntry e;
  e.name = name;
  e.type = type;
  e.ne = std::move(ne);
  tensors_.push_back(std::move(e));
  fills_.push_back(std::move(fill));
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  std::set<std::string> seen;
  for (const std::string& k : keys_) {
    if (!seen.insert(k).second) return absl::InvalidArgumentError("duplicate GGUF key " + k);
  }
  seen.clear();
  for (const TensorEntry& t : tensors_) {
    if (!seen.insert(t.name).second) {
      return absl::InvalidArgumentError("duplicate GGUF tensor " + t.name);
    }
  }
  std::string head;
  head.append("GGUF");
  Put<uint32_t>(&head, kVersion);
  Put<uint64_t>(&head, tensors_.size());
  Put<uint64_t>(&head, keys_.size());
  head.append(kvs_);
  uint64_t offset = 0;
  for (const TensorEntry& t : tensors_) {
    PutString(&head, t.name);
    Put<uint32_t>(&head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put<uint64_t>(&head, static_cast<uint64_t>(d));
    Put<uint32_t>(&head, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&head, offset);
    offset = AlignUp(offset + static_cast<uint64_t>(t.nbytes()));
  }
  head.resize(AlignUp(head.size()), '\0');

  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return absl::NotFoundError("cannot create " + path);
  if (std::fwrite(head.data(), 1, head.size(), f.get()) != head.size()) {
    return absl::InternalError("write failed: " + path);
  }
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const uint64_t n = static_cast<uint64_t>(tensors_[i].nbytes());
    buf.assign(AlignUp(n), 0);
    RETURN_IF_ERROR(fills_[i](buf.data()));
    // The last tensor is padded too, which keeps the file a multiple of the alignment.
    if (std::fwrite(buf.data(), 1, buf.size(), f.get()) != buf.size()) {
      return absl::InternalError("write failed: " + path);
    }
  }
  if (std::fflush(f.get()) != 0) return absl::InternalError("write failed: " + path);
  return absl::OkStatus();
}

}  // namespace moe::model::gguf
