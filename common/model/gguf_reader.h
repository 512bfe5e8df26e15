// Reads a GGUF file's header, metadata and tensor table back (format: gguf.h), for tests and for
// checking an export.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/gguf.h"

namespace moe::model::gguf {

struct FileInfo {
  uint32_t version = 0;
  std::map<std::string, Value> metadata;
  std::vector<TensorEntry> tensors;  // in file order
  uint64_t data_offset = 0;          // absolute offset of the data section
  uint64_t file_size = 0;
};

// Parses header, metadata and tensor table; checks tensor data lies within the file.
absl::StatusOr<FileInfo> ReadGgufHeader(const std::string& path);

}  // namespace moe::model::gguf
