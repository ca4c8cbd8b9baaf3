// tokenizer.json parity with Hugging Face tokenizers 0.23: the ids, character offsets, special-token ids and decoded
// text of the stress text, and for every fortunes file the token count, FNV-1a 64 hashes of the ids and offsets, the
// first ids and the round trip, against the golden files scripts/hf_oracles/make_hf_references.py made (committed
// under tests/data/hf/tokenizers). The tiny GPT-2 style tokenizer is committed beside its golden; the real Llama-3
// and Qwen3 files come from scripts/fetch-hf-tokenizers.sh.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/tokenizer.h"
#include "tests/test_support.h"

namespace retort::data {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using ::retort::testing::read_bytes;

const fs::path kGoldens = fs::path(RETORT_SOURCE_DIR) / "tests/data/hf/tokenizers";
const fs::path kFortunes = "/usr/share/games/fortunes";

// The golden's hash: FNV-1a 64 over the little-endian int32 values, 16 hex digits (written independently of
// core/data/content_hash so the code under test does not check itself).
std::string fnv1a64(std::span<const int32_t> values) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const int32_t value : values) {
    const auto bits = static_cast<uint32_t>(value);
    for (int k = 0; k < 4; ++k) {
      h ^= (bits >> (8 * k)) & 0xFF;
      h *= 0x100000001B3ull;
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::vector<int32_t> flat(const std::vector<CharOffsets>& offsets) {
  std::vector<int32_t> out;
  for (const CharOffsets& o : offsets) {
    out.push_back(static_cast<int32_t>(o.begin));
    out.push_back(static_cast<int32_t>(o.end));
  }
  return out;
}

struct Case {
  const char* name;
  fs::path tokenizer;
  bool fetched;  // from scripts/fetch-hf-tokenizers.sh, not committed
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class TokenizerJsonParity : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    if (c.fetched) {
      RETORT_REQUIRE_ORACLE(fs::is_regular_file(c.tokenizer),
                            c.tokenizer.string() + " is missing: fetch it with scripts/fetch-hf-tokenizers.sh");
    }
    golden_ = json::parse(read_bytes(kGoldens / c.name / "golden.json"));
  }
  json golden_;
};

TEST_P(TokenizerJsonParity, StressTextIdsOffsetsSpecialTokensAndDecodingAreHuggingFaces) {
  const Tokenizer tokenizer = Tokenizer::load(GetParam().tokenizer);
  EXPECT_STREQ(tokenizer.kind(), "tokenizer.json");
  EXPECT_EQ(tokenizer.vocab_size(), golden_.at("vocab_size_with_added").get<int64_t>());
  const std::string text = read_bytes(kGoldens / "stress.txt");
  const json& stress = golden_.at("stress");
  const TokenizedText encoded = tokenizer.encode_with_offsets(text);
  const auto ids = stress.at("ids").get<std::vector<int32_t>>();
  ASSERT_EQ(encoded.ids.size(), ids.size());
  ASSERT_EQ(encoded.offsets.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(encoded.ids[i], ids[i]) << "token " << i;
    ASSERT_EQ(encoded.offsets[i].begin, stress.at("offsets")[i][0].get<int64_t>()) << "token " << i;
    ASSERT_EQ(encoded.offsets[i].end, stress.at("offsets")[i][1].get<int64_t>()) << "token " << i;
  }
  EXPECT_EQ(tokenizer.encode(text), ids);
  EXPECT_EQ(tokenizer.encode(text, /*add_special_tokens=*/true),
            stress.at("ids_with_special_tokens").get<std::vector<int32_t>>());
  EXPECT_EQ(tokenizer.decode(encoded.ids), stress.at("decoded").get<std::string>());
}

TEST_P(TokenizerJsonParity, EveryFortunesFileEncodesAsHuggingFaceEncodesIt) {
  const Tokenizer tokenizer = Tokenizer::load(GetParam().tokenizer);
  const json& files = golden_.at("fortunes");
  ASSERT_GT(files.size(), 10u);
  for (const json& file : files) {
    const std::string name = file.at("file").get<std::string>();
    SCOPED_TRACE(name);
    const fs::path path = kFortunes / name;
    ASSERT_TRUE(fs::is_regular_file(path))
        << path << " is missing: install Debian's fortunes (scripts/install-deps.sh)";
    const std::string text = read_bytes(path);
    const TokenizedText encoded = tokenizer.encode_with_offsets(text);
    const std::vector<int32_t> offsets = flat(encoded.offsets);
    EXPECT_EQ(static_cast<int64_t>(encoded.ids.size()), file.at("count").get<int64_t>());
    EXPECT_EQ(std::vector<int32_t>(encoded.ids.begin(), encoded.ids.begin() + std::min<size_t>(64, encoded.ids.size())),
              file.at("first_ids").get<std::vector<int32_t>>());
    const bool ids_equal = fnv1a64(encoded.ids) == file.at("ids_hash").get<std::string>();
    const bool offsets_equal = fnv1a64(offsets) == file.at("offsets_hash").get<std::string>();
    EXPECT_TRUE(ids_equal);
    EXPECT_TRUE(offsets_equal);
    if (!ids_equal || !offsets_equal) {
      // The first chunk of 1024 tokens that differs, to find the text that encodes differently.
      const json& chunks = file.at("chunks");
      for (size_t c = 0; c < chunks.size(); ++c) {
        const size_t begin = c * 1024, end = std::min(encoded.ids.size(), begin + 1024);
        if (begin >= encoded.ids.size()) break;
        const std::span<const int32_t> ids(encoded.ids.data() + begin, end - begin);
        const std::span<const int32_t> offs(offsets.data() + 2 * begin, 2 * (end - begin));
        if (fnv1a64(ids) != chunks[c][0].get<std::string>() || fnv1a64(offs) != chunks[c][1].get<std::string>()) {
          ADD_FAILURE() << "first difference in tokens " << begin << ".." << end << ", text from character "
                        << encoded.offsets[begin].begin;
          break;
        }
      }
    }
    EXPECT_EQ(tokenizer.decode(encoded.ids, /*skip_special_tokens=*/true) == text, file.at("round_trip").get<bool>());
  }
}

// token_bytes against decode: every id alone, then whole texts (the stress text and the first fortunes files), where
// the tokens' bytes laid end to end must be the text itself, byte for byte.
TEST_P(TokenizerJsonParity, TokenBytesOfEveryIdAreWhatDecodingGivesAndSpellTheText) {
  const Tokenizer tokenizer = Tokenizer::load(GetParam().tokenizer);
  int64_t specials = 0, partial_characters = 0;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string bytes = tokenizer.token_bytes(id);
    const int32_t one[] = {id};
    if (tokenizer.is_special(id)) {
      ++specials;
      ASSERT_TRUE(bytes.empty()) << "special id " << id;
      ASSERT_TRUE(tokenizer.decode(one, /*skip_special_tokens=*/true).empty()) << "special id " << id;
      continue;
    }
    ASSERT_FALSE(bytes.empty()) << "id " << id << " stands for some text";
    const std::string decoded = tokenizer.decode(one);
    // A token holding part of one UTF-8 character decodes alone to U+FFFD; its bytes are the raw ones.
    if (decoded.find("\xEF\xBF\xBD") != std::string::npos && bytes.find("\xEF\xBF\xBD") == std::string::npos) {
      ++partial_characters;
      continue;
    }
    ASSERT_EQ(bytes, decoded) << "id " << id << " (" << tokenizer.piece(id) << ")";
  }
  EXPECT_GE(specials, 1) << "the eos token is special";
  EXPECT_TRUE(tokenizer.is_special(tokenizer.eos_id()));
  EXPECT_TRUE(tokenizer.token_bytes(tokenizer.eos_id()).empty());
  if (tokenizer.vocab_size() > 100000) {
    EXPECT_GT(partial_characters, 100) << "real vocabularies split characters";
  }
  EXPECT_THROW(tokenizer.token_bytes(static_cast<int32_t>(tokenizer.vocab_size())), InputError);
  EXPECT_THROW(tokenizer.is_special(-1), InputError);

  // The stress text with special tokens inside it: those stand for no text, so the bytes are the text decoded
  // without them.
  const std::string stress = read_bytes(kGoldens / "stress.txt");
  const std::vector<int32_t> stress_ids = tokenizer.encode(stress);
  std::string spelled_stress;
  for (const int32_t id : stress_ids) spelled_stress += tokenizer.token_bytes(id);
  EXPECT_EQ(spelled_stress, tokenizer.decode(stress_ids, /*skip_special_tokens=*/true));
  // Texts with no special token and already in NFC (Qwen3 normalizes): the bytes are the text itself. The stress
  // text loses its lines of special tokens and combining marks for that.
  std::string plain_stress;
  for (size_t at = 0; at < stress.size();) {
    const size_t end = std::min(stress.find('\n', at), stress.size() - 1) + 1;
    const std::string line = stress.substr(at, end - at);
    if (line.find("<|") == std::string::npos && !line.starts_with("Combining")) plain_stress += line;
    at = end;
  }
  std::vector<std::string> texts = {plain_stress};
  for (const char* name : {"fortunes", "computers", "art", "goedel"}) texts.push_back(read_bytes(kFortunes / name));
  for (const std::string& text : texts) {
    ASSERT_FALSE(text.empty());
    std::string spelled;
    for (const int32_t id : tokenizer.encode(text)) spelled += tokenizer.token_bytes(id);
    EXPECT_TRUE(spelled == text) << "the tokens' bytes must be the text (" << text.size() << " bytes)";
  }
}

INSTANTIATE_TEST_SUITE_P(
    HuggingFace, TokenizerJsonParity,
    ::testing::Values(Case{"tiny_gpt2_style", kGoldens / "tiny_gpt2_style/tokenizer.json", false},
                      Case{"llama3", fs::path(RETORT_HF_TOKENIZERS_DIR) / "llama3/tokenizer.json", true},
                      Case{"qwen3", fs::path(RETORT_HF_TOKENIZERS_DIR) / "qwen3/tokenizer.json", true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace retort::data
