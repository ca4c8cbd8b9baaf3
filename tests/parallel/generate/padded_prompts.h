#pragma once
// Prompts prefilled together: right-padded with zeros to one width, with each row's length (the `valid` counts of
// GptModel::forward_cached). Shared by the KV-cache and decode-step test supports.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace retort::generate_testing {

struct PaddedPrompts {
  std::vector<int32_t> ids;      // [rows * width]
  std::vector<int64_t> lengths;  // [rows]
};

// Every prompt must hold at most `width` tokens.
inline PaddedPrompts pad_prompts(const std::vector<std::vector<int32_t>>& prompts, int64_t width) {
  PaddedPrompts out;
  out.ids.assign(prompts.size() * static_cast<size_t>(width), 0);
  for (size_t b = 0; b < prompts.size(); ++b) {
    std::copy(prompts[b].begin(), prompts[b].end(), out.ids.begin() + static_cast<int64_t>(b) * width);
    out.lengths.push_back(static_cast<int64_t>(prompts[b].size()));
  }
  return out;
}

}  // namespace retort::generate_testing
