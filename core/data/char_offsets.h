#pragma once
// A token's place in the text it came from: [begin, end) in code points, as Hugging Face tokenizers report it.
#include <cstdint>

namespace retort::data {

struct CharOffsets {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const CharOffsets&) const = default;
};

}  // namespace retort::data
