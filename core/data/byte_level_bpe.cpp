#include "core/data/byte_level_bpe.h"

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/data/nfc_alignment.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSupported =
    "retort reads byte-level BPE tokenizer.json files (GPT-2, Llama-3, Qwen2/Qwen3; see docs/data.md), or give a "
    "SentencePiece .model file";

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// The length of the well-formed UTF-8 character at `at`, or 0 with `consumed` set to the length of its maximal
// ill-formed subpart (at least 1).
size_t utf8_char_at(std::string_view s, size_t at, size_t& consumed, char32_t* value = nullptr) {
  const auto c = static_cast<unsigned char>(s[at]);
  if (c < 0x80) {
    if (value) *value = c;
    return 1;
  }
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t v = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1, v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2, v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3, v = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    consumed = 1;
    return 0;
  }
  size_t i = 1;
  for (; i <= need; ++i) {
    if (at + i >= s.size()) break;
    const auto b = static_cast<unsigned char>(s[at + i]);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) break;
    v = (v << 6) | (b & 0x3F);
  }
  if (i == need + 1) {
    if (value) *value = v;
    return i;
  }
  consumed = i;
  return 0;
}

bool utf8_valid(std::string_view s) {
  for (size_t at = 0; at < s.size();) {
    if (static_cast<unsigned char>(s[at]) < 0x80) {
      ++at;
      continue;
    }
    size_t consumed = 0;
    const size_t n = utf8_char_at(s, at, consumed);
    if (n == 0) return false;
    at += n;
  }
  return true;
}

// Rust's char::is_whitespace (Unicode White_Space), for lstrip/rstrip of added tokens.
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point ending at byte `end` (exclusive) of valid UTF-8.
char32_t char_before(std::string_view s, size_t end, size_t& begin) {
  begin = end - 1;
  while (begin > 0 && is_continuation(static_cast<unsigned char>(s[begin]))) --begin;
  size_t consumed = 0;
  char32_t c = 0;
  utf8_char_at(s, begin, consumed, &c);
  return c;
}

// A word character for single_word added tokens: letters, digits and '_' (every non-ASCII character that is not
// whitespace counts as a letter).
bool is_word_char(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) != 0 || c == '_';
  return !is_whitespace(c);
}

std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

[[noreturn]] void unsupported(const std::string& origin, const std::string& key, const json& value,
                              const std::string& what) {
  throw InputError(
      fmt::format("'{}': {} = {} is not supported ({}): {}", origin, key, describe(value), what, kSupported));
}

const json& member(const json& object, const char* key, const std::string& path, const std::string& origin) {
  RETORT_INPUT_CHECK(object.is_object() && object.contains(key),
                     "'{}': {}{} is missing: the file is not a complete tokenizer.json; take it as the model's "
                     "save_pretrained wrote it",
                     origin, path.empty() ? "" : path + ".", key);
  return object.at(key);
}

bool flag(const json& object, const char* key, bool fallback = false) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? fallback : it->get<bool>();
}

}  // namespace

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> out{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      out[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return out;
  }();
  return table;
}

std::string utf8_with_replacement(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t at = 0; at < bytes.size();) {
    size_t consumed = 0;
    const size_t n = utf8_char_at(bytes, at, consumed);
    if (n > 0) {
      out.append(bytes.substr(at, n));
      at += n;
    } else {
      out += "\xEF\xBF\xBD";
      at += consumed;
    }
  }
  return out;
}

// Words already merged, by their bytes: text repeats its words, so most words are merged once. Sharded under
// mutexes because one tokenizer encodes from many threads (data shards); bounded by clearing a full shard.
class ByteLevelBpe::WordCache {
 public:
  bool find(std::string_view word, std::vector<int32_t>& ids) {
    Shard& shard = shard_of(word);
    std::lock_guard lock(shard.mutex);
    const auto it = shard.words.find(word);
    if (it == shard.words.end()) return false;
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return true;
  }
  void add(std::string_view word, std::span<const int32_t> ids) {
    Shard& shard = shard_of(word);
    std::lock_guard lock(shard.mutex);
    if (shard.words.size() >= kShardCapacity) shard.words.clear();
    shard.words.emplace(std::string(word), std::vector<int32_t>(ids.begin(), ids.end()));
  }

 private:
  static constexpr size_t kShards = 32, kShardCapacity = 1 << 14;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };
  Shard& shard_of(std::string_view word) { return shards_[StringHash{}(word) % kShards]; }
  std::array<Shard, kShards> shards_;
};

ByteLevelBpe::~ByteLevelBpe() = default;

std::unique_ptr<ByteLevelBpe> ByteLevelBpe::read(const fs::path& path) {
  return std::make_unique<ByteLevelBpe>(read_file(path), path.string());
}

ByteLevelBpe::ByteLevelBpe(std::string_view json_text, const std::string& origin)
    : origin_(origin), cache_(std::make_unique<WordCache>()) {
  json file;
  try {
    file = json::parse(json_text);
  } catch (const json::exception& error) {
    throw InputError(
        fmt::format("'{}' is not valid JSON ({}): a tokenizer.json is damaged or truncated; take the "
                    "file again from the model's folder",
                    origin, error.what()));
  }
  RETORT_INPUT_CHECK(file.is_object(), "'{}' is not a tokenizer.json (its top level is not a JSON object): {}", origin,
                     kSupported);
  for (const char* key : {"truncation", "padding"}) {
    if (file.contains(key) && !file.at(key).is_null()) unsupported(origin_, key, file.at(key), "set it to null");
  }
  read_model(member(file, "model", "", origin_));
  read_added_tokens(file.value("added_tokens", json::array()));
  read_normalizer(file.value("normalizer", json()));
  read_pre_tokenizer(member(file, "pre_tokenizer", "", origin_));
  read_post_processor(file.value("post_processor", json()), "post_processor");
  read_decoder(file.value("decoder", json()));
}

void ByteLevelBpe::read_model(const json& model) {
  const std::string type = model.value("type", std::string());
  if (type != "BPE") unsupported(origin_, "model.type", model.value("type", json()), "only BPE models");
  if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout").get<double>() != 0.0) {
    unsupported(origin_, "model.dropout", model.at("dropout"), "encoding must be deterministic");
  }
  if (flag(model, "byte_fallback")) unsupported(origin_, "model.byte_fallback", true, "byte-level BPE needs none");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model.at(key).is_null() && !model.at(key).get<std::string>().empty()) {
      unsupported(origin_, std::string("model.") + key, model.at(key), "byte-level BPE uses none");
    }
  }
  ignore_merges_ = flag(model, "ignore_merges");
  const json& vocab = member(model, "vocab", "model", origin_);
  RETORT_INPUT_CHECK(vocab.is_object() && !vocab.empty(), "'{}': model.vocab is not a non-empty object of token: id",
                     origin_);
  int64_t size = 0;
  for (const auto& [text, id] : vocab.items()) {
    const int64_t value = id.get<int64_t>();
    RETORT_INPUT_CHECK(value >= 0 && value < (int64_t{1} << 31), "'{}': model.vocab[\"{}\"] = {} is not a valid id",
                       origin_, text, value);
    size = std::max(size, value + 1);
  }
  tokens_.assign(size, std::string());
  used_.assign(size, 0);
  token_ids_.reserve(vocab.size() + 1024);
  vocab_by_bytes_.reserve(vocab.size());
  std::unordered_map<char32_t, unsigned char> unicode_to_byte;
  for (int b = 0; b < 256; ++b) unicode_to_byte[byte_to_unicode()[b]] = static_cast<unsigned char>(b);
  for (const auto& [text, id] : vocab.items()) {
    const auto value = id.get<int32_t>();
    tokens_[value] = text;
    used_[value] = 1;
    token_ids_[text] = value;
    // The bytes a vocabulary token stands for; a token with a character outside the byte map stands for itself.
    std::string bytes;
    bool mapped = true;
    for (size_t at = 0; at < text.size() && mapped;) {
      size_t consumed = 0;
      char32_t c = 0;
      const size_t n = utf8_char_at(text, at, consumed, &c);
      const auto it = n ? unicode_to_byte.find(c) : unicode_to_byte.end();
      mapped = it != unicode_to_byte.end();
      if (mapped) bytes += static_cast<char>(it->second);
      at += n ? n : consumed;
    }
    if (mapped) vocab_by_bytes_.emplace(bytes, value);
  }
  for (int b = 0; b < 256; ++b) {
    std::string stand_in;
    append_utf8(stand_in, byte_to_unicode()[b]);
    const auto it = token_ids_.find(stand_in);
    RETORT_INPUT_CHECK(it != token_ids_.end(),
                       "'{}': model.vocab has no token for byte 0x{:02X} (\"{}\"): a byte-level BPE vocabulary holds "
                       "all 256 byte tokens; {}",
                       origin_, b, stand_in, kSupported);
    byte_ids_[b] = it->second;
  }
  const json& merges = member(model, "merges", "model", origin_);
  RETORT_INPUT_CHECK(merges.is_array(), "'{}': model.merges is not an array", origin_);
  merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& merge = merges[rank];
    std::string left, right;
    if (merge.is_string()) {
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      RETORT_INPUT_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
                         "'{}': model.merges[{}] = {} is not two tokens separated by one space", origin_, rank,
                         describe(merge));
      left = line.substr(0, space), right = line.substr(space + 1);
    } else {
      RETORT_INPUT_CHECK(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
                         "'{}': model.merges[{}] = {} is neither \"a b\" nor [\"a\", \"b\"]", origin_, rank,
                         describe(merge));
      left = merge[0].get<std::string>(), right = merge[1].get<std::string>();
    }
    const auto a = token_ids_.find(left), b = token_ids_.find(right), merged = token_ids_.find(left + right);
    RETORT_INPUT_CHECK(a != token_ids_.end() && b != token_ids_.end() && merged != token_ids_.end(),
                       "'{}': model.merges[{}] = {} names a token that model.vocab lacks ('{}'): the file is "
                       "inconsistent; take it again from the model's folder",
                       origin_, rank, describe(merge),
                       a == token_ids_.end()   ? left
                       : b == token_ids_.end() ? right
                                               : left + right);
    merges_[pair_key(a->second, b->second)] = Merge{static_cast<int32_t>(rank), merged->second};
  }
}

void ByteLevelBpe::read_added_tokens(const json& added) {
  RETORT_INPUT_CHECK(added.is_array(), "'{}': added_tokens is not an array", origin_);
  for (size_t i = 0; i < added.size(); ++i) {
    const json& entry = added[i];
    const std::string key = fmt::format("added_tokens[{}]", i);
    AddedToken token;
    token.content = member(entry, "content", key, origin_).get<std::string>();
    const int64_t id = member(entry, "id", key, origin_).get<int64_t>();
    RETORT_INPUT_CHECK(id >= 0 && id < (int64_t{1} << 31) && !token.content.empty(),
                       "'{}': {} has id {} and content \"{}\": an added token needs a valid id and some text", origin_,
                       key, id, token.content);
    token.id = static_cast<int32_t>(id);
    token.special = flag(entry, "special");
    token.single_word = flag(entry, "single_word");
    token.lstrip = flag(entry, "lstrip");
    token.rstrip = flag(entry, "rstrip");
    // "normalized" tokens are matched in the normalized text; without a normalizer that is the text itself. A
    // normalizer is read after the added tokens, so the check is made there.
    if (flag(entry, "normalized")) normalized_added_.push_back(key);
    if (token.id >= vocab_size()) {
      tokens_.resize(token.id + 1);
      used_.resize(token.id + 1, 0);
    }
    tokens_[token.id] = token.content;
    used_[token.id] = 1;
    token_ids_[token.content] = token.id;
    added_.push_back(std::move(token));
  }
  special_.assign(tokens_.size(), 0);
  for (const AddedToken& token : added_) special_[token.id] = token.special ? 1 : 0;
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_first_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(i);
  }
  for (auto& list : added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [&](size_t a, size_t b) { return added_[a].content.size() > added_[b].content.size(); });
  }
  // The bytes each id decodes to (the ByteLevel decoder's rule: a token whose characters all have bytes in the
  // map is those bytes, any other token is its own text).
  std::unordered_map<char32_t, unsigned char> unicode_to_byte;
  for (int b = 0; b < 256; ++b) unicode_to_byte[byte_to_unicode()[b]] = static_cast<unsigned char>(b);
  token_bytes_.assign(tokens_.size(), std::string());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const std::string& text = tokens_[id];
    std::string bytes;
    bool mapped = true;
    for (size_t at = 0; at < text.size() && mapped;) {
      size_t consumed = 0;
      char32_t c = 0;
      const size_t n = utf8_char_at(text, at, consumed, &c);
      const auto it = n ? unicode_to_byte.find(c) : unicode_to_byte.end();
      mapped = it != unicode_to_byte.end();
      if (mapped) bytes += static_cast<char>(it->second);
      at += n ? n : consumed;
    }
    token_bytes_[id] = mapped ? bytes : text;
  }
}

void ByteLevelBpe::read_normalizer(const json& normalizer) {
  if (!normalizer.is_null()) {
    const std::string type = normalizer.value("type", std::string());
    if (type == "NFC") {
      nfc_ = true;
    } else if (type == "Sequence") {
      const json& steps = member(normalizer, "normalizers", "normalizer", origin_);
      for (size_t i = 0; i < steps.size(); ++i) {
        if (steps[i].value("type", std::string()) != "NFC") {
          unsupported(origin_, fmt::format("normalizer.normalizers[{}].type", i), steps[i].value("type", json()),
                      "the only normalizer read is NFC");
        }
        nfc_ = true;
      }
    } else {
      unsupported(origin_, "normalizer.type", normalizer.value("type", json()), "the only normalizer read is NFC");
    }
  }
  if (nfc_ && !normalized_added_.empty()) {
    unsupported(origin_, normalized_added_.front() + ".normalized", true,
                "added tokens matched after normalization are read only without a normalizer");
  }
}

void ByteLevelBpe::read_pre_tokenizer(const json& pre_tokenizer) {
  std::vector<std::pair<std::string, const json*>> steps;
  if (pre_tokenizer.is_object() && pre_tokenizer.value("type", std::string()) == "Sequence") {
    const json& list = member(pre_tokenizer, "pretokenizers", "pre_tokenizer", origin_);
    for (size_t i = 0; i < list.size(); ++i) {
      steps.emplace_back(fmt::format("pre_tokenizer.pretokenizers[{}]", i), &list[i]);
    }
  } else {
    steps.emplace_back("pre_tokenizer", &pre_tokenizer);
  }
  bool byte_level = false;
  for (const auto& [key, step] : steps) {
    RETORT_INPUT_CHECK(!byte_level,
                       "'{}': {} comes after the ByteLevel step: ByteLevel must be the last "
                       "pre-tokenizer; {}",
                       origin_, key, kSupported);
    const std::string type = step->is_object() ? step->value("type", std::string()) : std::string();
    if (type == "Split") {
      const std::string behavior = step->value("behavior", std::string());
      if (behavior != "Isolated") {
        unsupported(origin_, key + ".behavior", step->value("behavior", json()), "only Isolated splits");
      }
      if (flag(*step, "invert")) unsupported(origin_, key + ".invert", true, "only invert false");
      const json& pattern = member(*step, "pattern", key, origin_);
      if (pattern.contains("Regex")) {
        splits_.emplace_back(pattern.at("Regex").get<std::string>(),
                             fmt::format("{}.pattern.Regex of '{}'", key, origin_));
      } else if (pattern.contains("String")) {
        splits_.emplace_back(pattern.at("String").get<std::string>(),
                             fmt::format("{}.pattern.String of '{}'", key, origin_), /*literal=*/true);
      } else {
        unsupported(origin_, key + ".pattern", pattern, "a pattern is {\"Regex\": ...} or {\"String\": ...}");
      }
    } else if (type == "ByteLevel") {
      if (flag(*step, "add_prefix_space")) {
        unsupported(origin_, key + ".add_prefix_space", true, "only add_prefix_space false");
      }
      // trim_offsets of a ByteLevel pre-tokenizer plays no part in encoding (the post-processor's does).
      if (flag(*step, "use_regex", true)) {
        splits_.emplace_back(kGpt2SplitPattern, "GPT-2's split pattern (ByteLevel use_regex true)");
      }
      byte_level = true;
    } else {
      unsupported(origin_, key + ".type", step->is_object() ? step->value("type", json()) : *step,
                  "pre-tokenizers read: Split (Isolated) and ByteLevel");
    }
  }
  RETORT_INPUT_CHECK(byte_level, "'{}': pre_tokenizer = {} has no ByteLevel step, so it is no byte-level BPE; {}",
                     origin_, describe(pre_tokenizer), kSupported);
}

void ByteLevelBpe::read_post_processor(const json& post, const std::string& key) {
  if (post.is_null()) return;
  const std::string type = post.value("type", std::string());
  if (type == "Sequence") {
    const json& list = member(post, "processors", key, origin_);
    for (size_t i = 0; i < list.size(); ++i) read_post_processor(list[i], fmt::format("{}.processors[{}]", key, i));
  } else if (type == "ByteLevel") {
    PostStep step;
    step.trim_offsets = flag(post, "trim_offsets");
    step.add_prefix_space = flag(post, "add_prefix_space");
    post_.push_back(step);
  } else if (type == "TemplateProcessing") {
    PostStep step;
    step.is_template = true;
    const json& single = member(post, "single", key, origin_);
    const json& specials = post.value("special_tokens", json::object());
    for (size_t i = 0; i < single.size(); ++i) {
      const json& piece = single[i];
      TemplateItem item;
      if (piece.contains("Sequence")) {
        const std::string id = piece.at("Sequence").value("id", std::string());
        if (id != "A") unsupported(origin_, fmt::format("{}.single[{}].Sequence.id", key, i), id, "one text, A");
        item.is_text = true;
      } else if (piece.contains("SpecialToken")) {
        const std::string name = piece.at("SpecialToken").value("id", std::string());
        RETORT_INPUT_CHECK(specials.contains(name),
                           "'{}': {}.single[{}] names the special token \"{}\" that {}.special_tokens lacks", origin_,
                           key, i, name, key);
        for (const json& id : specials.at(name).at("ids")) {
          const auto value = id.get<int64_t>();
          RETORT_INPUT_CHECK(value >= 0 && value < vocab_size(),
                             "'{}': {}.special_tokens[\"{}\"] has id {}, outside the vocabulary (0..{})", origin_, key,
                             name, value, vocab_size() - 1);
          item.ids.push_back(static_cast<int32_t>(value));
        }
      } else {
        unsupported(origin_, fmt::format("{}.single[{}]", key, i), piece, "template pieces: Sequence, SpecialToken");
      }
      step.single.push_back(std::move(item));
    }
    post_.push_back(std::move(step));
  } else {
    unsupported(origin_, key + ".type", post.value("type", json()),
                "post-processors read: ByteLevel, TemplateProcessing and a Sequence of them");
  }
}

void ByteLevelBpe::read_decoder(const json& decoder) {
  if (decoder.is_null() || decoder.value("type", std::string()) != "ByteLevel") {
    unsupported(origin_, "decoder", decoder, "the only decoder read is ByteLevel");
  }
}

const std::string& ByteLevelBpe::token(int32_t id) const {
  RETORT_INPUT_CHECK(id >= 0 && id < vocab_size() && used_[id], "token id {} is not in tokenizer '{}' (ids 0..{})", id,
                     origin_, vocab_size() - 1);
  return tokens_[id];
}

std::optional<int32_t> ByteLevelBpe::token_id(std::string_view token) const {
  const auto it = token_ids_.find(token);
  return it == token_ids_.end() ? std::nullopt : std::optional(it->second);
}

bool ByteLevelBpe::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[id];
}

std::string ByteLevelBpe::token_bytes(int32_t id) const {
  RETORT_INPUT_CHECK(id >= 0 && id < vocab_size(), "token id {} is not in tokenizer '{}' (ids 0..{})", id, origin_,
                     vocab_size() - 1);
  if (!used_[id] || special_[id]) return {};
  return token_bytes_[id];
}

std::optional<std::pair<int32_t, int32_t>> ByteLevelBpe::merge_of(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  if (it == merges_.end()) return std::nullopt;
  return std::pair{it->second.rank, it->second.id};
}

std::optional<std::tuple<size_t, size_t, size_t>> ByteLevelBpe::find_added(std::string_view text, size_t from) const {
  for (size_t at = from; at < text.size(); ++at) {
    const auto& candidates = added_by_first_byte_[static_cast<unsigned char>(text[at])];
    for (const size_t index : candidates) {
      const AddedToken& token = added_[index];
      if (text.compare(at, token.content.size(), token.content) != 0) continue;
      size_t begin = at, end = at + token.content.size();
      if (token.single_word) {
        size_t before = 0, consumed = 0;
        char32_t next = 0;
        const bool word_before = begin > 0 && is_word_char(char_before(text, begin, before));
        const bool word_after = end < text.size() && utf8_char_at(text, end, consumed, &next) > 0 && is_word_char(next);
        if (word_before || word_after) continue;
      }
      if (token.lstrip) {
        size_t before = 0;
        while (begin > from && is_whitespace(char_before(text, begin, before))) begin = before;
      }
      if (token.rstrip) {
        size_t consumed = 0;
        char32_t next = 0;
        while (end < text.size()) {
          const size_t n = utf8_char_at(text, end, consumed, &next);
          if (n == 0 || !is_whitespace(next)) break;
          end += n;
        }
      }
      return std::tuple{begin, end, index};
    }
  }
  return std::nullopt;
}

void ByteLevelBpe::merge_word(std::string_view bytes, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(bytes.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids_[static_cast<unsigned char>(bytes[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  }
  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>{}, std::move(storage));
  auto offer = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) offer(i);
  // Lowest rank first, leftmost among equals; an entry whose pair has changed since it was queued is stale.
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.id != top.id) continue;
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) offer(left.prev);
    offer(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

void ByteLevelBpe::encode_word(std::string_view bytes, std::vector<int32_t>& ids) const {
  if (bytes.size() == 1) {
    ids.push_back(byte_ids_[static_cast<unsigned char>(bytes[0])]);
    return;
  }
  if (ignore_merges_) {
    const auto it = vocab_by_bytes_.find(bytes);
    if (it != vocab_by_bytes_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  // Very long pieces (a run of digits or spaces) are rarely repeated; caching them would only evict words.
  constexpr size_t kLongestCached = 128;
  const bool cacheable = bytes.size() <= kLongestCached;
  if (cacheable && cache_->find(bytes, ids)) return;
  const size_t first = ids.size();
  merge_word(bytes, ids);
  if (cacheable) cache_->add(bytes, std::span<const int32_t>(ids).subspan(first));
}

void ByteLevelBpe::encode_stretch(std::string_view text, size_t base, std::vector<int32_t>& ids,
                                  std::vector<std::pair<size_t, size_t>>* ranges) const {
  AlignedText normalized;
  std::string_view work = text;
  if (nfc_) {
    normalized = nfc_with_alignment(text);
    work = normalized.text;
  }
  std::vector<std::pair<uint32_t, uint32_t>> pieces{{0, static_cast<uint32_t>(work.size())}}, next;
  for (const Pcre2Regex& split : splits_) {
    next.clear();
    for (const auto& [begin, end] : pieces) {
      size_t last = begin;
      split.for_each_match(work.substr(begin, end - begin), [&](size_t b, size_t e) {
        if (begin + b > last) next.emplace_back(last, begin + b);
        next.emplace_back(begin + b, begin + e);
        last = begin + e;
      });
      if (end > last) next.emplace_back(last, end);
    }
    pieces.swap(next);
  }
  for (const auto& [begin, end] : pieces) {
    const size_t first = ids.size();
    encode_word(work.substr(begin, end - begin), ids);
    if (!ranges) continue;
    // Each token's bytes, widened to whole characters of the source (a character split over two tokens belongs
    // to both), as Hugging Face reports them.
    size_t at = begin;
    for (size_t i = first; i < ids.size(); ++i) {
      const size_t last = at + token_bytes_[ids[i]].size() - 1;
      size_t b, e;
      if (normalized.origin.empty()) {
        b = at;
        while (b > 0 && is_continuation(static_cast<unsigned char>(text[b]))) --b;
        e = last + 1;
        while (e < text.size() && is_continuation(static_cast<unsigned char>(text[e]))) ++e;
      } else {
        b = normalized.origin[at].first;
        e = normalized.origin[last].second;
      }
      ranges->emplace_back(base + b, base + e);
      at = last + 1;
    }
  }
}

void ByteLevelBpe::encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& ids,
                          std::vector<CharOffsets>* offsets) const {
  std::string replaced;
  if (!utf8_valid(text)) {
    replaced = utf8_with_replacement(text);
    text = replaced;
  }
  std::vector<int32_t> out;
  std::vector<std::pair<size_t, size_t>> ranges;
  auto* want = offsets ? &ranges : nullptr;
  for (size_t at = 0; at < text.size();) {
    const auto match = added_.empty() ? std::nullopt : find_added(text, at);
    const size_t stop = match ? std::get<0>(*match) : text.size();
    if (stop > at) encode_stretch(text.substr(at, stop - at), at, out, want);
    if (!match) break;
    out.push_back(added_[std::get<2>(*match)].id);
    if (want) ranges.emplace_back(std::get<0>(*match), std::get<1>(*match));
    at = std::get<1>(*match);
  }
  constexpr size_t kNoText = static_cast<size_t>(-1);
  for (const PostStep& step : post_) {
    if (step.is_template) {
      if (!add_special_tokens) continue;
      std::vector<int32_t> with;
      std::vector<std::pair<size_t, size_t>> with_ranges;
      for (const TemplateItem& item : step.single) {
        if (item.is_text) {
          with.insert(with.end(), out.begin(), out.end());
          with_ranges.insert(with_ranges.end(), ranges.begin(), ranges.end());
        } else {
          with.insert(with.end(), item.ids.begin(), item.ids.end());
          if (want) with_ranges.insert(with_ranges.end(), item.ids.size(), {kNoText, kNoText});
        }
      }
      out.swap(with);
      ranges.swap(with_ranges);
    } else if (step.trim_offsets && want) {
      // Hugging Face's ByteLevel offset trimming: leading and trailing spaces ('Ġ') of a token leave its offsets.
      for (size_t i = 0; i < out.size(); ++i) {
        if (ranges[i].first == kNoText) continue;
        const std::string& token = tokens_[out[i]];
        size_t leading = 0, trailing = 0;
        for (size_t at = 0; at + 1 < token.size() && token.compare(at, 2, "\xC4\xA0") == 0; at += 2) ++leading;
        for (size_t at = token.size(); at >= 2 && token.compare(at - 2, 2, "\xC4\xA0") == 0; at -= 2) ++trailing;
        auto& [b, e] = ranges[i];
        if (leading > 0) {
          const bool is_first = i == 0 || b == 0;
          if (!(is_first && step.add_prefix_space && leading == 1)) b = std::min(b + leading, e);
        }
        if (trailing > 0 && e >= trailing) e = std::max(e - trailing, b);
      }
    }
  }
  if (offsets) {
    // Byte offsets -> code point offsets.
    std::vector<uint32_t> chars(text.size() + 1, 0);
    uint32_t count = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      chars[i] = count;
      if (!is_continuation(static_cast<unsigned char>(text[i]))) ++count, chars[i] = count - 1;
    }
    chars[text.size()] = count;
    for (const auto& [b, e] : ranges) {
      offsets->push_back(b == kNoText ? CharOffsets{} : CharOffsets{chars[b], chars[e]});
    }
  }
  ids.insert(ids.end(), out.begin(), out.end());
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  encode(text, add_special_tokens, ids);
  return ids;
}

std::string ByteLevelBpe::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    RETORT_INPUT_CHECK(id >= 0 && id < vocab_size() && used_[id],
                       "cannot decode token id {} at position {}: tokenizer '{}' has ids 0..{}", id, i, origin_,
                       vocab_size() - 1);
    if (skip_special_tokens && special_[id]) continue;
    bytes += token_bytes_[id];
  }
  return utf8_valid(bytes) ? bytes : utf8_with_replacement(bytes);
}

}  // namespace retort::data
