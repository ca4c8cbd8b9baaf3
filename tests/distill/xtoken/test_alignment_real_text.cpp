// Alignment of real tokenizations: the Llama-3 and Qwen3 tokenizer.json files and two SentencePiece tokenizers
// trained here, over fortunes files and a stress text (digit runs: Llama-3 groups up to 3 digits, Qwen3 writes one
// per token; code, CJK, emoji, combining marks, special-token text). Properties: every token in exactly one chunk,
// chunks in order, every correct chunk decodes to the same text on both sides (the text of its bytes), the
// canonical strings spell the text, and the string alignment finds the offset alignment's chunks.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/data/corpus.h"
#include "core/data/nfc_alignment.h"
#include "core/data/tokenizer.h"
#include "distill/xtoken/alignment.h"
#include "distill/xtoken/alignment_stats.h"
#include "distill/xtoken/canonical_strings.h"
#include "distill/xtoken/tokenizer_spans.h"
#include "tests/distill/xtoken/alignment_test_support.h"
#include "tests/test_support.h"

namespace retort::distill::xtoken {
namespace {
namespace fs = std::filesystem;
using ::retort::testing::read_bytes;
using testing_support::expect_tiles_both_sides;

const fs::path kFortunes = "/usr/share/games/fortunes";
const fs::path kHf = RETORT_HF_TOKENIZERS_DIR;

// Fortunes files with ASCII art, code (perl), and non-ASCII text (translate-me, pratchett).
const std::vector<std::string> kFortuneFiles = {"ascii-art", "debian", "perl", "translate-me", "pratchett", "magic"};

// tests/data/hf/tokenizers/stress.txt (the tokenizer parity tests' text) with more digit runs, code, CJK, emoji and
// combining marks; bench/run_alignment_bench.sh measures on the same file.
std::string stress_text() {
  return read_bytes(fs::path(RETORT_SOURCE_DIR) / "tests/data/xtoken/stress.txt");
}

struct Named {
  std::string name;
  std::shared_ptr<data::Tokenizer> tokenizer;
};

std::shared_ptr<data::Tokenizer> trained_sentencepiece(int64_t vocab_size, const std::string& corpus_file) {
  const std::vector<std::string> documents = data::split_documents(read_bytes(kFortunes / corpus_file));
  data::TokenizerTrainOptions options;
  options.vocab_size = vocab_size;
  options.model_path = fs::temp_directory_path() / ("retort_alignment_real_text_" + std::to_string(::getpid())) /
                       ("sp" + std::to_string(vocab_size) + ".model");
  auto tokenizer = std::make_shared<data::Tokenizer>(data::Tokenizer::train(documents, options));
  fs::remove_all(options.model_path.parent_path());
  return tokenizer;
}

class RealTokenizations : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* family : {"llama3", "qwen3"}) {
      const fs::path file = kHf / family / "tokenizer.json";
      if (fs::is_regular_file(file)) {
        hf_.push_back({family, std::make_shared<data::Tokenizer>(data::Tokenizer::load(file))});
      }
    }
    sentencepiece_.push_back({"sp-bpe-400", trained_sentencepiece(400, "wisdom")});
    sentencepiece_.push_back({"sp-bpe-1500", trained_sentencepiece(1500, "science")});
  }
  static void TearDownTestSuite() {
    hf_.clear();
    sentencepiece_.clear();
  }
  static std::vector<Named> hf_, sentencepiece_;
};
std::vector<Named> RealTokenizations::hf_, RealTokenizations::sentencepiece_;

// In the test body itself: a skip (or a failure) inside a helper function would return from the helper only, and the
// test would go on to index the missing tokenizers.
#define REQUIRE_HF_TOKENIZERS()                                                                \
  RETORT_REQUIRE_ORACLE(hf_.size() == 2,                                                       \
                        "data/hf-tokenizers/{llama3,qwen3}/tokenizer.json are missing: fetch " \
                        "them with scripts/fetch-hf-tokenizers.sh")

std::string decode_range(const data::Tokenizer& tokenizer, const SideTokens& side, int32_t begin, int32_t end) {
  return tokenizer.decode(std::span<const int32_t>(side.ids).subspan(size_t(begin), size_t(end - begin)));
}

// Aligns the text both ways and checks every property; returns the offset alignment's statistics.
AlignmentStats check_pair(const Named& student, const Named& teacher, const std::string& text, bool with_strings) {
  SCOPED_TRACE(student.name + " vs " + teacher.name);
  const SideTokens s = side_tokens(*student.tokenizer, text), t = side_tokens(*teacher.tokenizer, text);
  const Alignment a = align_by_offsets(s, t);
  expect_tiles_both_sides(a, int64_t(s.ids.size()), int64_t(t.ids.size()));
  for (size_t k = 0; k < a.chunks.size(); ++k) {
    const Chunk& c = a.chunks[k];
    if (!c.correct) continue;
    const std::string s_text = decode_range(*student.tokenizer, s, c.student_begin, c.student_end);
    const std::string t_text = decode_range(*teacher.tokenizer, t, c.teacher_begin, c.teacher_end);
    const int64_t begin = s.spans[size_t(c.student_begin)].begin, end = s.spans[size_t(c.student_end - 1)].end;
    EXPECT_EQ(s_text, t_text) << "chunk " << k;
    EXPECT_EQ(s_text, text.substr(size_t(begin), size_t(end - begin))) << "chunk " << k;
  }
  if (with_strings) {
    const std::vector<std::string> ss = canonical_token_strings(*student.tokenizer, s);
    const std::vector<std::string> ts = canonical_token_strings(*teacher.tokenizer, t);
    std::string s_all, t_all;
    for (const std::string& p : ss) s_all += p;
    for (const std::string& p : ts) t_all += p;
    // Qwen3 normalises to NFC: its strings spell the NFC form of the text.
    auto read = [&](const Named& side) { return side.name == "qwen3" ? data::nfc_with_alignment(text).text : text; };
    EXPECT_EQ(s_all, read(student)) << student.name << "'s canonical strings do not spell the text";
    EXPECT_EQ(t_all, read(teacher)) << teacher.name << "'s canonical strings do not spell the text";
    const Alignment b = align_by_strings(ss, s.roles, ts, t.roles);
    EXPECT_EQ(b.chunks.size(), a.chunks.size());
    for (size_t k = 0; k < std::min(a.chunks.size(), b.chunks.size()); ++k) {
      if (!(a.chunks[k] == b.chunks[k])) {
        ADD_FAILURE() << "chunk " << k << ": strings " << ::testing::PrintToString(b.chunks[k]) << ", offsets "
                      << ::testing::PrintToString(a.chunks[k]);
        break;
      }
    }
  }
  return alignment_stats(a);
}

TEST_F(RealTokenizations, Llama3AndQwen3OnFortunesAndTheStressText) {
  REQUIRE_HF_TOKENIZERS();
  for (const std::string& name : kFortuneFiles) {
    SCOPED_TRACE(name);
    const AlignmentStats st = check_pair(hf_[0], hf_[1], read_bytes(kFortunes / name), true);
    EXPECT_GT(st.student_share(), 0.98);
    EXPECT_GT(st.teacher_share(), 0.98);
  }
  // The stress text has decomposed marks (e + U+0301) that Qwen3's NFC composes: those tokens are altered, their
  // chunks not correct, and the string alignment (which sees Qwen3's composed bytes) cannot match the offsets there.
  const AlignmentStats st = check_pair(hf_[0], hf_[1], stress_text(), false);
  // Digit runs: Llama-3's 3-digit tokens against Qwen3's single digits are 1:N chunks.
  EXPECT_GT(st.correct_chunks_by_shape[size_t(ChunkShape::kOneToMany)], 10);
  EXPECT_FALSE(low_alignment_warning(st).has_value());
  // Qwen3 as the student: the shapes mirror.
  const AlignmentStats mirrored = check_pair(hf_[1], hf_[0], stress_text(), false);
  EXPECT_EQ(mirrored.correct_chunks_by_shape[size_t(ChunkShape::kManyToOne)],
            st.correct_chunks_by_shape[size_t(ChunkShape::kOneToMany)]);
}

// Neither tokenizer.json's post-processor adds a special token, so the document framing a training row gives is
// added by hand: Llama-3's <|begin_of_text|> in front of the student, each side's eos at the end.
TEST_F(RealTokenizations, BosOnTheLlamaSideIsAnOrphanAndTheEosTokensPair) {
  REQUIRE_HF_TOKENIZERS();
  const std::string text = "Hello world 12345, ñ 日本";
  SideTokens s = side_tokens(*hf_[0].tokenizer, text);
  SideTokens t = side_tokens(*hf_[1].tokenizer, text);
  ASSERT_TRUE(s.altered.empty() && t.altered.empty());
  s.ids.insert(s.ids.begin(), 128000);
  s.spans.insert(s.spans.begin(), ByteSpan{0, 0});
  s.roles.insert(s.roles.begin(), SpecialRole::kBos);
  for (auto [side, named] : {std::pair{&s, &hf_[0]}, std::pair{&t, &hf_[1]}}) {
    side->ids.push_back(named->tokenizer->eos_id());
    side->spans.push_back({int64_t(text.size()), int64_t(text.size())});
    side->roles.push_back(SpecialRole::kEos);
  }
  const Alignment a = align_by_offsets(s, t);
  expect_tiles_both_sides(a, int64_t(s.ids.size()), int64_t(t.ids.size()));
  ASSERT_GE(a.chunks.size(), 3u);
  EXPECT_EQ(shape_of(a.chunks.front()), ChunkShape::kStudentOnly);
  EXPECT_EQ(a.chunks.back().student_begin, int32_t(s.ids.size()) - 1);
  EXPECT_EQ(a.chunks.back().teacher_begin, int32_t(t.ids.size()) - 1);
  for (size_t k = 1; k < a.chunks.size(); ++k) EXPECT_TRUE(a.chunks[k].correct) << k;
  // "12345": Llama-3 reads 123|45, Qwen3 1|2|3|4|5: two 1:N chunks.
  const AlignmentStats st = alignment_stats(a);
  EXPECT_GE(st.correct_chunks_by_shape[size_t(ChunkShape::kOneToMany)], 2);
}

// What the string alignment is for: texts that differ. The teacher reads the text inside Qwen's chat template, the
// student reads it bare; the template's tokens are teacher-only, every student token still lands in a correct chunk.
TEST_F(RealTokenizations, StringAlignmentOfATextAndTheSameTextInAChatTemplate) {
  REQUIRE_HF_TOKENIZERS();
  const std::string text = read_bytes(kFortunes / "debian");
  const std::string wrapped = "<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n";
  const SideTokens s = side_tokens(*hf_[0].tokenizer, text), t = side_tokens(*hf_[1].tokenizer, wrapped);
  const std::vector<std::string> ss = canonical_token_strings(*hf_[0].tokenizer, s);
  const std::vector<std::string> ts = canonical_token_strings(*hf_[1].tokenizer, t);
  const Alignment a = align_by_strings(ss, s.roles, ts, t.roles);
  expect_tiles_both_sides(a, int64_t(s.ids.size()), int64_t(t.ids.size()));
  const AlignmentStats st = alignment_stats(a);
  EXPECT_EQ(st.student_tokens_in_correct, st.student_tokens);
  // The template: <|im_start|> user \n before, <|im_end|> \n <|im_start|> assistant \n after (the text's last
  // newline and the template's may merge into one token).
  EXPECT_GE(st.teacher_tokens - st.teacher_tokens_in_correct, 6);
  EXPECT_LE(st.teacher_tokens - st.teacher_tokens_in_correct, 9);
  EXPECT_EQ(st.chunks_by_shape[size_t(ChunkShape::kStudentOnly)], 0);
}

TEST_F(RealTokenizations, TwoSentencePieceTokenizersOnFortunesAndTheStressText) {
  for (const std::string& name : kFortuneFiles) {
    SCOPED_TRACE(name);
    check_pair(sentencepiece_[0], sentencepiece_[1], read_bytes(kFortunes / name), true);
  }
  // Characters the small vocabularies never saw (CJK, emoji) fall back to byte pieces sharing one span.
  const AlignmentStats st = check_pair(sentencepiece_[0], sentencepiece_[1], stress_text(), true);
  EXPECT_FALSE(low_alignment_warning(st).has_value());
}

TEST_F(RealTokenizations, SentencePieceStudentAndHuggingFaceTeacher) {
  REQUIRE_HF_TOKENIZERS();
  for (const Named& teacher : hf_) {
    const AlignmentStats st = check_pair(sentencepiece_[1], teacher, stress_text(), teacher.name != "qwen3");
    EXPECT_FALSE(low_alignment_warning(st).has_value());
  }
}

TEST(TokenizerSpans, CharacterOffsetsBecomeByteSpans) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z: 1, 2, 3, 4, 1 bytes
  const std::vector<data::CharOffsets> offsets = {{0, 1}, {1, 3}, {3, 4}, {3, 4}, {4, 5}, {5, 5}};
  const std::vector<ByteSpan> spans = byte_spans_from_char_offsets(text, offsets);
  const std::vector<std::pair<int64_t, int64_t>> expected = {{0, 1}, {1, 6}, {6, 10}, {6, 10}, {10, 11}, {11, 11}};
  ASSERT_EQ(spans.size(), expected.size());
  for (size_t k = 0; k < spans.size(); ++k) {
    EXPECT_EQ(spans[k].begin, expected[k].first) << k;
    EXPECT_EQ(spans[k].end, expected[k].second) << k;
  }
  const std::vector<data::CharOffsets> past = {{4, 6}};
  EXPECT_CONTAINS(::retort::testing::message_of([&] { byte_spans_from_char_offsets(text, past); }),
                  "outside the text's 5 characters");
  EXPECT_CONTAINS(::retort::testing::message_of([&] { byte_spans_from_char_offsets("a\xFF", past); }),
                  "not valid UTF-8 at byte 1");
}

}  // namespace
}  // namespace retort::distill::xtoken
