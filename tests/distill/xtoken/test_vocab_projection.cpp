// The student -> teacher vocabulary projection: every row of two hand-made byte-level BPE tokenizers worked out on
// paper (exact matches, two pieces at .909 / .091, three, four, the cut at four, a repeated piece, specials by role,
// padding rows), the reverse pass and canonical ids, the common ids of the gold loss, SentencePiece models trained
// here (byte pieces beside text pieces), and the real Llama-3 -> Qwen3 pair.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>

#include "core/data/byte_level_bpe.h"
#include "core/data/tokenizer.h"
#include "distill/xtoken/common_ids.h"
#include "distill/xtoken/vocab_projection.h"
#include "tests/distill/xtoken/projection_test_tokenizers.h"
#include "tests/test_support.h"

namespace retort::distill::xtoken {
namespace {

namespace fs = std::filesystem;
using data::utf8_with_replacement;
using ::retort::testing::TempFolder;
using testing::AddedToken;
using testing::write_bpe_tokenizer;

using Row = std::map<int32_t, double>;

// The matrix's host copy, made once per projection (a row at a time would copy the whole matrix per row).
struct HostCsr {
  std::vector<int32_t> offsets, ids;
  std::vector<float> weights;
};

Row row_of(const HostCsr& csr, int64_t s) {
  Row row;
  for (int32_t e = csr.offsets[s]; e < csr.offsets[s + 1]; ++e) row[csr.ids[e]] = csr.weights[e];
  return row;
}

HostCsr host_csr(const StudentTeacherProjection& p) {
  return {p.matrix.row_offsets.to_ints(), p.matrix.teacher_ids.to_ints(), p.matrix.weights.to_floats()};
}

Row row_of(const StudentTeacherProjection& p, int64_t s) {
  const std::vector<int32_t> offsets = p.matrix.row_offsets.to_ints();
  const std::vector<int32_t> ids = p.matrix.teacher_ids.to_ints();
  const std::vector<float> weights = p.matrix.weights.to_floats();
  Row row;
  for (int32_t e = offsets[s]; e < offsets[s + 1]; ++e) row[ids[e]] = weights[e];
  return row;
}

// Piece i of n weighs 0.9 * 0.1^i over the sum of the n weights.
std::vector<double> piece_weights(int n) {
  std::vector<double> w;
  double total = 0;
  for (int i = 0; i < n; ++i) total += 0.9 * std::pow(0.1, i);
  for (int i = 0; i < n; ++i) w.push_back(0.9 * std::pow(0.1, i) / total);
  return w;
}

void expect_row(const StudentTeacherProjection& p, int64_t s, const std::vector<std::pair<int32_t, double>>& want) {
  const Row row = row_of(p, s);
  ASSERT_EQ(row.size(), want.size()) << "student id " << s;
  for (const auto& [t, w] : want) {
    ASSERT_TRUE(row.contains(t)) << "student id " << s << " lacks teacher id " << t;
    EXPECT_NEAR(row.at(t), w, 1e-6) << "student id " << s << ", teacher id " << t;
  }
}

std::vector<std::pair<int32_t, int32_t>> pairs(const Tensor& t) {
  EXPECT_EQ(t.ndim(), 2);
  EXPECT_EQ(t.size(1), 2);
  const std::vector<int32_t> flat = t.to_ints();
  std::vector<std::pair<int32_t, int32_t>> out;
  for (size_t i = 0; i + 1 < flat.size(); i += 2) out.emplace_back(flat[i], flat[i + 1]);
  return out;
}

int32_t byte_id(char c) {
  return static_cast<unsigned char>(c);
}

// Teacher: 256 he, 257 ll, 258 hell, 259 xy, 260 <|endoftext|>.
// Student: 256 he, 257 ll, 258 hell, 259 hello, 260 ab, 261 abc, 262 abcd, 263 abcde, 264 abcdef, 265 zz, 266 yw,
// 267 xyw, 268 <|endoftext|>, 269 <|pad|>.
class HandMadeProjection : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    folder_ = new TempFolder("HandMadeProjection");
    fs::create_directories(folder_->path() / "teacher");
    fs::create_directories(folder_->path() / "student");
    fs::create_directories(folder_->path() / "teacher2");
    teacher_ = new data::Tokenizer(data::Tokenizer::load(write_bpe_tokenizer(
        folder_->path() / "teacher", {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"x", "y"}}, {{"<|endoftext|>"}})));
    student_ = new data::Tokenizer(data::Tokenizer::load(write_bpe_tokenizer(folder_->path() / "student",
                                                                             {{"h", "e"},
                                                                              {"l", "l"},
                                                                              {"he", "ll"},
                                                                              {"hell", "o"},
                                                                              {"a", "b"},
                                                                              {"ab", "c"},
                                                                              {"abc", "d"},
                                                                              {"abcd", "e"},
                                                                              {"abcde", "f"},
                                                                              {"z", "z"},
                                                                              {"y", "w"},
                                                                              {"x", "yw"}},
                                                                             {{"<|endoftext|>"}, {"<|pad|>"}})));
    // The teacher with a second token for "ll": a non-special added token, which its encoder writes for "ll".
    teacher2_ = new data::Tokenizer(data::Tokenizer::load(
        write_bpe_tokenizer(folder_->path() / "teacher2", {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"x", "y"}},
                            {{"<|endoftext|>"}, {"ll", /*special=*/false}})));
  }
  static void TearDownTestSuite() {
    delete teacher2_;
    delete student_;
    delete teacher_;
    delete folder_;
  }
  static inline TempFolder* folder_ = nullptr;
  static inline data::Tokenizer *teacher_ = nullptr, *student_ = nullptr, *teacher2_ = nullptr;
};

TEST_F(HandMadeProjection, EveryRowIsWhatTheRulesGive) {
  ASSERT_EQ(teacher_->vocab_size(), 261);
  ASSERT_EQ(student_->vocab_size(), 270);
  ASSERT_EQ(student_->token_bytes(267), "xyw");
  // Models padded past their tokenizers: 4 student rows and 6 teacher columns that no token has.
  const StudentTeacherProjection p = build_vocab_projection(*student_, *teacher_, 274, 267);
  EXPECT_EQ(p.matrix.student_vocab, 274);
  EXPECT_EQ(p.matrix.teacher_vocab, 267);
  EXPECT_EQ(p.matrix.row_offsets.shape(), (Shape{275}));

  for (int b = 0; b < 256; ++b) expect_row(p, b, {{b, 1.0}});
  for (int s : {256, 257, 258}) expect_row(p, s, {{s, 1.0}});
  const std::vector<double> two = piece_weights(2), three = piece_weights(3), four = piece_weights(4);
  EXPECT_NEAR(two[0], 0.909090909, 1e-8);
  EXPECT_NEAR(two[1], 0.090909091, 1e-8);
  // "hello": the teacher merges he, ll, hell and leaves the o.
  expect_row(p, 259, {{258, two[0]}, {byte_id('o'), two[1]}});
  expect_row(p, 260, {{byte_id('a'), two[0]}, {byte_id('b'), two[1]}});
  expect_row(p, 261, {{byte_id('a'), three[0]}, {byte_id('b'), three[1]}, {byte_id('c'), three[2]}});
  const std::vector<std::pair<int32_t, double>> abcd = {
      {byte_id('a'), four[0]}, {byte_id('b'), four[1]}, {byte_id('c'), four[2]}, {byte_id('d'), four[3]}};
  expect_row(p, 262, abcd);
  // Five and six pieces are cut to the first four, normalised over those four.
  expect_row(p, 263, abcd);
  expect_row(p, 264, abcd);
  // "zz" is z twice: one teacher id with all the weight, yet not an exact match.
  expect_row(p, 265, {{byte_id('z'), 1.0}});
  expect_row(p, 266, {{byte_id('y'), two[0]}, {byte_id('w'), two[1]}});
  expect_row(p, 267, {{259, two[0]}, {byte_id('w'), two[1]}});
  // End of document by role; a special the teacher lacks, and the padding rows, map to nothing.
  expect_row(p, 268, {{260, 1.0}});
  for (int s : {269, 270, 271, 272, 273}) expect_row(p, s, {});

  std::vector<uint8_t> exact(274, 0);
  for (int s = 0; s < 259; ++s) exact[s] = 1;
  exact[268] = 1;
  EXPECT_EQ(p.exact, exact);
  EXPECT_EQ(p.canonical, std::vector<uint8_t>(274, 1));
  EXPECT_EQ(p.report.student_tokenizer_ids, 270);
  EXPECT_EQ(p.report.exact_rows, 260);
  EXPECT_EQ(p.report.reencoded_rows, 9);
  EXPECT_EQ(p.report.empty_rows, 5);
  EXPECT_NEAR(p.report.exact_share, 260.0 / 270.0, 1e-12);
  // Entries: 260 exact rows of one, hello 2, ab 2, abc 3, abcd..abcdef 3 x 4, zz 1, yw 2, xyw 2.
  EXPECT_NEAR(p.report.mean_pieces, (260.0 + 2 + 2 + 3 + 12 + 1 + 2 + 2) / 269.0, 1e-12);
  EXPECT_FALSE(p.report.loaded);
  EXPECT_GE(p.report.build_seconds, 0.0);
  EXPECT_NE(describe(p.report).find("260 of 270 student ids (96.3%) map exactly"), std::string::npos)
      << describe(p.report);
}

TEST_F(HandMadeProjection, CommonIdsAreTheStrictAndTheRelaxedPairs) {
  const CommonIds common = common_ids(build_vocab_projection(*student_, *teacher_, 274, 267));
  std::vector<std::pair<int32_t, int32_t>> strict;
  for (int s = 0; s < 259; ++s) strict.emplace_back(s, s);
  strict.emplace_back(268, 260);
  EXPECT_EQ(pairs(common.strict), strict);
  // Relaxed adds xyw -> xy (.909). hello -> hell, ab -> a, yw -> y and zz -> z (weight 1, but not exact) lose their
  // teacher id to the exact student token of it.
  std::vector<std::pair<int32_t, int32_t>> relaxed = strict;
  relaxed.insert(relaxed.end() - 1, {267, 259});
  EXPECT_EQ(pairs(common.relaxed), relaxed);
}

TEST_F(HandMadeProjection, TheTeachersCanonicalTokenTakesTheExactMatchAndTheReversePassAddsTheOthers) {
  ASSERT_EQ(teacher2_->encode("ll"), std::vector<int32_t>{261}) << "the added token is what the encoder writes";
  const StudentTeacherProjection forward = build_vocab_projection(*student_, *teacher2_, 270, 262);
  expect_row(forward, 257, {{261, 1.0}});
  EXPECT_EQ(forward.exact[257], 1);

  ProjectionOptions options;
  options.reverse_pass = true;
  const StudentTeacherProjection both = build_vocab_projection(*student_, *teacher2_, 270, 262, options);
  expect_row(both, 257, {{257, 0.5}, {261, 0.5}});
  // Every other row is the forward pass's.
  for (int s = 0; s < 270; ++s) {
    if (s != 257) {
      EXPECT_EQ(row_of(both, s), row_of(forward, s)) << "student id " << s;
    }
  }
  // A row spread over two teacher ids is no strict pair any more; relaxed needs 0.6.
  const CommonIds common = common_ids(both);
  for (const auto& [s, t] : pairs(common.strict)) EXPECT_NE(s, 257);
  for (const auto& [s, t] : pairs(common.relaxed)) EXPECT_NE(s, 257);
}

TEST_F(HandMadeProjection, ModelVocabulariesSmallerThanTheTokenizersAreRefused) {
  std::string message = ::retort::testing::message_of([&] { build_vocab_projection(*student_, *teacher_, 269, 261); });
  EXPECT_NE(message.find("student model's vocabulary (269 ids) is smaller than its tokenizer's"), std::string::npos)
      << message;
  message = ::retort::testing::message_of([&] { build_vocab_projection(*student_, *teacher_, 270, 260); });
  EXPECT_NE(message.find("teacher model's vocabulary (260 ids)"), std::string::npos) << message;
}

// SentencePiece models trained here, as the cross-tokenizer app trains them (BPE teacher, unigram student): byte
// pieces stand for the same bytes as text pieces, so the canonical ids matter.
TEST(SentencePieceProjection, ByteAndTextPiecesMapToTheCanonicalTeacherTokenAndPairOnce) {
  TempFolder folder;
  std::vector<std::string> corpus;
  const std::string text = ::retort::testing::read_bytes("/usr/share/games/fortunes/fortunes");
  ASSERT_FALSE(text.empty()) << "install Debian's fortunes (scripts/install-deps.sh)";
  for (size_t at = 0; at < text.size(); at += 2000) corpus.push_back(text.substr(at, 2000));
  const data::Tokenizer teacher =
      data::Tokenizer::train(corpus, {.vocab_size = 1024, .model_path = folder.path() / "bpe.model"});
  const data::Tokenizer student = data::Tokenizer::train(corpus, {.vocab_size = 512,
                                                                  .model_path = folder.path() / "unigram.model",
                                                                  .model_type = data::TokenizerModelType::kUnigram});
  const StudentTeacherProjection p = build_vocab_projection(student, teacher, 512, 1024);
  const std::vector<int32_t> offsets = p.matrix.row_offsets.to_ints();
  const std::vector<int32_t> ids = p.matrix.teacher_ids.to_ints();
  int64_t exact = 0;
  for (int32_t s = 0; s < 512; ++s) {
    if (!p.exact[s] || s == student.eos_id()) continue;
    ++exact;
    ASSERT_EQ(offsets[s + 1] - offsets[s], 1);
    EXPECT_EQ(teacher.token_bytes(ids[offsets[s]]), student.token_bytes(s)) << student.piece(s);
  }
  EXPECT_GT(exact, 256) << "the byte pieces and many text pieces are shared";
  // 'e' is a text piece on both sides: the student's byte piece <0x65> is not canonical, and both rows go to the
  // teacher's text piece (what its encoder writes for "e").
  const int32_t student_e = student.encode("e").at(0), teacher_e = teacher.encode("e").at(0);
  const int32_t student_byte_e = 2 + 'e';
  ASSERT_EQ(student.piece(student_byte_e), "<0x65>");
  ASSERT_NE(student_e, student_byte_e);
  EXPECT_EQ(p.canonical[student_byte_e], 0);
  EXPECT_EQ(p.canonical[student_e], 1);
  expect_row(p, student_e, {{teacher_e, 1.0}});
  expect_row(p, student_byte_e, {{teacher_e, 1.0}});
  // A byte no text piece has (the lead byte of a 3-byte character) maps to the teacher's byte piece.
  expect_row(p, 2 + 0xE2, {{2 + 0xE2, 1.0}});
  // One pair per teacher id; "e" pairs with the student's text piece.
  std::map<int32_t, int32_t> student_of_teacher;
  for (const auto& [s, t] : pairs(common_ids(p).strict)) {
    EXPECT_TRUE(student_of_teacher.emplace(t, s).second) << "teacher id " << t << " paired twice";
  }
  EXPECT_EQ(student_of_teacher.at(teacher_e), student_e);
  EXPECT_EQ(student_of_teacher.at(teacher.eos_id()), student.eos_id());
}

// The Llama-3 and Qwen3 tokenizer.json that scripts/fetch-hf-tokenizers.sh fetches.
bool real_tokenizers_present() {
  const fs::path dir = RETORT_HF_TOKENIZERS_DIR;
  return fs::is_regular_file(dir / "llama3/tokenizer.json") && fs::is_regular_file(dir / "qwen3/tokenizer.json");
}
data::Tokenizer real_tokenizer(const std::string& name) {
  return data::Tokenizer::load(fs::path(RETORT_HF_TOKENIZERS_DIR) / name / "tokenizer.json");
}

// The real pair: Llama-3's tokenizer (student, 128,256 ids) into Qwen3's (teacher, 151,669 ids; its model has
// 151,936 rows).
TEST(RealTokenizerProjection, Llama3IntoQwen3) {
  RETORT_REQUIRE_ORACLE(real_tokenizers_present(),
                        "the Llama-3 and Qwen3 tokenizers are missing: fetch them with scripts/fetch-hf-tokenizers.sh");
  const data::Tokenizer llama = real_tokenizer("llama3"), qwen = real_tokenizer("qwen3");
  ASSERT_EQ(llama.vocab_size(), 128256);
  ASSERT_EQ(qwen.vocab_size(), 151669);
  const StudentTeacherProjection p = build_vocab_projection(llama, qwen, 128256, 151936);
  std::printf("Llama-3 -> Qwen3: %s\n", describe(p.report).c_str());
  EXPECT_GT(p.report.exact_share, 0.6);
  EXPECT_LE(p.report.mean_pieces, 4.0);

  const HostCsr csr = host_csr(p);
  const std::vector<int32_t>& offsets = csr.offsets;
  const std::vector<int32_t>& ids = csr.ids;
  const auto single = [&](int32_t s) {
    EXPECT_EQ(offsets[s + 1] - offsets[s], 1) << llama.piece(s);
    return ids[offsets[s]];
  };
  // Common words map exactly, to the Qwen token of the same bytes.
  for (const char* word : {" the", " and", "ing", " function", "\n\n", " {"}) {
    const std::vector<int32_t> l = llama.encode(word), q = qwen.encode(word);
    ASSERT_EQ(l.size(), 1u) << word;
    ASSERT_EQ(q.size(), 1u) << word;
    EXPECT_EQ(single(l[0]), q[0]) << word;
    EXPECT_EQ(qwen.token_bytes(q[0]), word);
  }
  // Llama-3 groups up to three digits, Qwen3 writes each digit: "123" is three pieces, 1 then 2 then 3.
  const std::vector<int32_t> number = llama.encode("123");
  ASSERT_EQ(number.size(), 1u);
  const Row digits = row_of(csr, number[0]);
  ASSERT_EQ(digits.size(), 3u);
  const std::vector<double> three = piece_weights(3);
  for (int i = 0; i < 3; ++i) {
    const int32_t digit = qwen.encode(std::string(1, static_cast<char>('1' + i))).at(0);
    EXPECT_NEAR(digits.at(digit), three[i], 1e-6) << "digit " << i + 1;
  }
  // The end of text by role; Qwen's padding rows are no targets.
  EXPECT_EQ(single(llama.eos_id()), qwen.eos_id());
  for (const int32_t t : ids) ASSERT_LT(t, 151669);
  // Every exact row stands for the same bytes. Every other row of valid text is Qwen's encoding of the bytes, its
  // first four pieces weighted 0.9 * 0.1^i (a repeated piece adding up); where those pieces are fewer than four and
  // distinct they spell the bytes (Qwen3's NFC may change a few).
  int64_t reencoded = 0, distinct = 0, spelled = 0, partial = 0, partial_spelled = 0;
  for (int32_t s = 0; s < 128256; ++s) {
    if (llama.is_special(s)) continue;
    const std::string bytes = llama.token_bytes(s);
    if (p.exact[s]) {
      ASSERT_EQ(qwen.token_bytes(ids[offsets[s]]), bytes) << llama.piece(s);
      continue;
    }
    if (bytes != utf8_with_replacement(bytes)) {
      // Part of a character: its text stretches encoded, each other byte Qwen's token of that byte; in order they
      // spell the bytes where no piece repeats and none is cut.
      ++partial;
      const Row row = row_of(csr, s);
      if (row.size() >= 4) continue;
      std::string joined;
      for (int32_t e = offsets[s]; e < offsets[s + 1]; ++e) joined += qwen.token_bytes(ids[e]);
      partial_spelled += joined == bytes;
      continue;
    }
    ++reencoded;
    const std::vector<int32_t> pieces = qwen.encode(bytes);
    const size_t kept = std::min<size_t>(pieces.size(), 4);
    const std::vector<double> w = piece_weights(static_cast<int>(kept));
    Row expected;
    for (size_t i = 0; i < kept; ++i) expected[pieces[i]] += w[i];
    const Row row = row_of(csr, s);
    ASSERT_EQ(row.size(), expected.size()) << llama.piece(s);
    for (const auto& [t, weight] : expected) ASSERT_NEAR(row.at(t), weight, 1e-6) << llama.piece(s);
    if (pieces.size() >= 4 || expected.size() != pieces.size()) continue;
    ++distinct;
    std::string joined;
    for (const int32_t t : pieces) joined += qwen.token_bytes(t);
    spelled += joined == bytes;
  }
  EXPECT_GT(reencoded, 10000);
  std::printf(
      "re-encoded rows: %lld of text, %lld spelled of %lld with distinct pieces; %lld parts of characters, "
      "%lld spelled\n",
      static_cast<long long>(reencoded), static_cast<long long>(spelled), static_cast<long long>(distinct),
      static_cast<long long>(partial), static_cast<long long>(partial_spelled));
  EXPECT_GT(partial, 0);
  EXPECT_GT(static_cast<double>(partial_spelled), 0.9 * static_cast<double>(partial))
      << partial_spelled << " of " << partial;
  EXPECT_GT(static_cast<double>(spelled), 0.99 * static_cast<double>(distinct)) << spelled << " of " << distinct;
  const CommonIds common = common_ids(p);
  std::printf("common ids: %lld strict, %lld relaxed\n", static_cast<long long>(common.strict.size(0)),
              static_cast<long long>(common.relaxed.size(0)));
  EXPECT_GT(common.relaxed.size(0), common.strict.size(0));
}

// The other way round: Qwen3's model has 151,936 rows over its tokenizer's 151,669 ids; the rows past the tokenizer
// map to nothing.
TEST(RealTokenizerProjection, Qwen3IntoLlama3LeavesThePaddingRowsEmpty) {
  RETORT_REQUIRE_ORACLE(real_tokenizers_present(),
                        "the Llama-3 and Qwen3 tokenizers are missing: fetch them with scripts/fetch-hf-tokenizers.sh");
  const data::Tokenizer llama = real_tokenizer("llama3"), qwen = real_tokenizer("qwen3");
  const StudentTeacherProjection p = build_vocab_projection(qwen, llama, 151936, 128256);
  std::printf("Qwen3 -> Llama-3: %s\n", describe(p.report).c_str());
  EXPECT_GT(p.report.exact_share, 0.6);
  const HostCsr csr = host_csr(p);
  ASSERT_EQ(csr.offsets.size(), 151937u);
  for (int64_t s = 151669; s < 151936; ++s) EXPECT_EQ(csr.offsets[s + 1], csr.offsets[s]) << "padding row " << s;
  EXPECT_GE(p.report.empty_rows, 151936 - 151669);
  EXPECT_EQ(row_of(csr, qwen.eos_id()), (Row{{llama.eos_id(), 1.0}}));
  for (const int32_t t : csr.ids) ASSERT_LT(t, 128256);
}

}  // namespace
}  // namespace retort::distill::xtoken
