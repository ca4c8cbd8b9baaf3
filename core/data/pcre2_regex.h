#pragma once
// A compiled PCRE2 pattern over UTF-8 text, for the split patterns of tokenizer.json pre-tokenizers. PCRE2 (not
// RE2 or std::regex) because these patterns use lookahead ("\s+(?!\S)") and Unicode properties (\p{L}, \p{N}).
// Compiled with UTF + UCP, so \s, \w and \d follow Unicode as the Hugging Face tokenizers do, and JIT-compiled where
// the platform supports it.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace retort::data {

class Pcre2Regex {
 public:
  // `what` names the pattern's origin for messages (e.g. "pre_tokenizer.pretokenizers[0].pattern.Regex in
  // 'tokenizer.json'"); a pattern that does not compile is an InputError naming it, the offset and PCRE2's reason.
  // literal: the pattern is a plain string to find, not a regular expression.
  Pcre2Regex(const std::string& pattern, const std::string& what, bool literal = false);
  Pcre2Regex(Pcre2Regex&&) noexcept;
  Pcre2Regex& operator=(Pcre2Regex&&) noexcept;
  ~Pcre2Regex();

  // Calls on_match(begin, end) with byte offsets into `text` for each non-overlapping match, left to right. An
  // empty match advances by one character. `text` must be valid UTF-8.
  void for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace retort::data
