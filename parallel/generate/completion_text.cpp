#include "parallel/generate/completion_text.h"

#include <algorithm>
#include <string_view>

#include "core/util/error.h"

namespace retort::generate {

namespace {

// U+FFFD in UTF-8: what the tokenizer decodes an incomplete byte sequence to. At the end of the text it may be
// the first bytes of a character whose last bytes are still to come.
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

CompletionText::CompletionText(const data::Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : tokenizer_(&tokenizer) {
  for (auto& stop : stop_strings)
    if (!stop.empty()) stops_.push_back(std::move(stop));
}

bool CompletionText::push(int32_t token) {
  RETORT_CHECK(!over_, "a token was pushed after the completion ended");
  if (token == tokenizer_->eos_id()) {
    end_ = End::EndOfText;
    over_ = true;
    return false;
  }
  tokens_.push_back(token);
  // Decoding the whole completion again (not just the new piece) lets byte pieces merge into characters.
  text_ = tokenizer_->decode(tokens_);
  size_t cut = std::string::npos;
  for (const auto& stop : stops_) cut = std::min(cut, text_.find(stop));
  if (cut == std::string::npos) return true;
  text_.resize(cut);
  end_ = End::StopString;
  over_ = true;
  return false;
}

size_t CompletionText::stable_length() const {
  if (over_) return text_.size();
  size_t stable = text_.size();
  while (stable >= kReplacement.size() &&
         std::string_view(text_).substr(stable - kReplacement.size(), kReplacement.size()) == kReplacement)
    stable -= kReplacement.size();
  // Hold back the longest tail that could still grow into a stop string (only a tail shorter than a stop can).
  size_t longest_stop = 0;
  for (const auto& stop : stops_) longest_stop = std::max(longest_stop, stop.size());
  for (size_t start = stable >= longest_stop ? stable - longest_stop + 1 : 0; start < stable; ++start) {
    const std::string_view tail = std::string_view(text_).substr(start, stable - start);
    const bool prefix_of_stop = std::any_of(stops_.begin(), stops_.end(), [&](const std::string& stop) {
      return stop.size() > tail.size() && std::string_view(stop).substr(0, tail.size()) == tail;
    });
    if (prefix_of_stop) return start;
  }
  return stable;
}

std::string CompletionText::take_stable() {
  // A stop string always starts inside the held-back tail, so the text never shrinks below what was taken.
  const size_t stable = std::max(stable_length(), taken_);
  std::string out = taken_ < text_.size() ? text_.substr(taken_, stable - taken_) : std::string();
  taken_ = stable;
  return out;
}

}  // namespace retort::generate
