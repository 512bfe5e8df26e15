#include "tools/moe/ensure_model.h"

#include <cstdint>
#include <filesystem>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/model/make_model.h"

namespace moe::cli {

namespace fs = std::filesystem;

absl::Status EnsureModel(const std::string& preset_name, const std::string& dir,
                         const std::function<void(const std::string&)>& progress) {
  if (fs::exists(fs::path(dir) / "config.json")) return absl::OkStatus();
  absl::StatusOr<model::Preset> preset = model::ParsePreset(preset_name);
  if (!preset.ok()) return preset.status();
  progress(absl::StrCat("making the '", preset_name, "' model in ", dir, " (first run only)..."));
  model::MakeModelOptions make;
  make.preset = *preset;
  int last_pct = -1;
  make.progress = [&](int64_t done, int64_t total) {
    const int pct = total > 0 ? static_cast<int>(100 * done / total) : 100;
    if (pct / 10 != last_pct / 10) {
      progress(absl::StrCat("  weights ", pct, "%"));
      last_pct = pct;
    }
  };
  const std::string tmp = dir + ".partial";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (absl::Status s = model::MakeModel(make, tmp); !s.ok()) return s;
  fs::remove_all(dir, ec);
  fs::create_directories(fs::path(dir).parent_path(), ec);
  fs::rename(tmp, dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot move the model to ", dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace moe::cli
