// The playground's static files (this folder), compiled into the gateway (embed.cmake) so that
// `gateway` serves them from wherever it runs, with no build step for the page itself.
#pragma once

#include <string_view>

namespace moe::gateway {

struct PlaygroundAsset {
  std::string_view path;  // "/index.html", "/playground/app.js", ...
  std::string_view content_type;
  std::string_view body;
};

// nullptr when `path` is not one of the files.
const PlaygroundAsset* FindPlaygroundAsset(std::string_view path);

}  // namespace moe::gateway
