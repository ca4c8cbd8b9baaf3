#pragma once
// The text of one completion as its tokens arrive: decoded with the run's tokenizer, cut before the first stop
// string, ended by the tokenizer's end-of-text token, and released for printing only where no later token can
// change it (so a terminal never shows the start of a stop string, or half of a UTF-8 character, that the final
// text does not hold).
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/tokenizer.h"

namespace retort::generate {

class CompletionText {
 public:
  enum class End { None, StopString, EndOfText };

  // `tokenizer` must outlive this object. Empty stop strings are ignored.
  CompletionText(const data::Tokenizer& tokenizer, std::vector<std::string> stop_strings);

  // Adds the next token. Returns false when it ends the completion: the end-of-text token (not part of the text),
  // or a token that completes a stop string (the text is cut before the stop string). No token after that.
  bool push(int32_t token);
  // No more tokens are coming: the held-back tail becomes final.
  void finish() { over_ = true; }

  // The text not taken before that no later token can change (all of it once the completion is over).
  std::string take_stable();

  const std::string& text() const { return text_; }  // the completion so far
  End end() const { return end_; }

 private:
  size_t stable_length() const;

  const data::Tokenizer* tokenizer_;
  std::vector<std::string> stops_;
  std::vector<int32_t> tokens_;
  std::string text_;
  size_t taken_ = 0;
  bool over_ = false;
  End end_ = End::None;
};

}  // namespace retort::generate
