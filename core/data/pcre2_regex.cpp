#include "core/data/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/util/error.h"

namespace retort::data {

struct Pcre2Regex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

// Match data holds per-match state, so each thread keeps its own (one per pattern) and a shared const tokenizer
// encodes from many threads without locking.
class MatchDataCache {
 public:
  ~MatchDataCache() {
    for (auto& [code, data] : data_) pcre2_match_data_free(data);
  }
  pcre2_match_data* get(const pcre2_code* code) {
    auto [it, inserted] = data_.try_emplace(code, nullptr);
    if (inserted) it->second = pcre2_match_data_create_from_pattern(code, nullptr);
    return it->second;
  }

 private:
  std::unordered_map<const pcre2_code*, pcre2_match_data*> data_;
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

Pcre2Regex::Pcre2Regex(const std::string& pattern, const std::string& what, bool literal)
    : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0u);
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                                  &error_offset, nullptr);
  RETORT_INPUT_CHECK(compiled_->code != nullptr,
                     "the pattern {} ('{}') does not compile: {} at offset {}: fix the pattern in the file", what,
                     pattern, pcre2_message(error), error_offset);
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

Pcre2Regex::Pcre2Regex(Pcre2Regex&&) noexcept = default;
Pcre2Regex& Pcre2Regex::operator=(Pcre2Regex&&) noexcept = default;
Pcre2Regex::~Pcre2Regex() = default;

void Pcre2Regex::for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const {
  thread_local MatchDataCache cache;
  pcre2_match_data* data = cache.get(compiled_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at <= text.size()) {
    // The text was checked once by the caller; PCRE2 need not re-validate it for every match.
    const int rc = compiled_->jit
                       ? pcre2_jit_match(compiled_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, data, nullptr)
                       : pcre2_match(compiled_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    RETORT_CHECK(rc >= 0, "matching the pattern '{}' failed: {}", pattern_, pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      on_match(begin, end);
      at = end;
    } else {
      // An empty match is no piece; step over one whole character.
      at = begin + 1;
      while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
      if (begin >= text.size()) return;
    }
  }
}

}  // namespace retort::data
