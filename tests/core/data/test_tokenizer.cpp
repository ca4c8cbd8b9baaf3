// The SentencePiece tokenizer as retort trains it: determinism, exact round trips (unicode and bytes never
// seen in training), the end-of-document id, loading, and errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/data/content_hash.h"
#include "core/data/tokenizer.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort::data {
namespace {
namespace fs = std::filesystem;
using ::retort::testing::message_of;
using ::retort::testing::read_bytes;
using ::retort::testing::TempFolder;

// A small ASCII corpus: sentences drawn from a fixed word list by a fixed generator.
std::vector<std::string> small_corpus(int documents, uint64_t salt = 0) {
  static const char* const kWords[] = {"the",   "quick",  "brown", "fox",  "jumps",    "over", "lazy", "dog",
                                       "a",     "stitch", "in",    "time", "saves",    "nine", "to",   "be",
                                       "or",    "not",    "that",  "is",   "question", "of",   "and",  "with",
                                       "model", "token",  "train", "loss", "data",     "42",   "2024", "retort"};
  uint64_t x = 88172645463325252ull ^ salt;
  const auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::vector<std::string> corpus;
  for (int d = 0; d < documents; ++d) {
    std::string text;
    const int lines = 1 + static_cast<int>(next() % 4);
    for (int l = 0; l < lines; ++l) {
      const int words = 3 + static_cast<int>(next() % 9);
      for (int w = 0; w < words; ++w) {
        if (w > 0) text += ' ';
        text += kWords[next() % (sizeof(kWords) / sizeof(kWords[0]))];
      }
      text += l + 1 == lines ? ".\n" : ",\n";
    }
    corpus.push_back(text);
  }
  return corpus;
}

TEST(DataTokenizer, TrainingIsDeterministic) {
  TempFolder folder;
  const std::vector<std::string> corpus = small_corpus(400);
  const Tokenizer first = Tokenizer::train(corpus, {.vocab_size = 400, .model_path = folder.path() / "a.model"});
  const Tokenizer second = Tokenizer::train(corpus, {.vocab_size = 400, .model_path = folder.path() / "b.model"});
  EXPECT_EQ(first.fingerprint(), second.fingerprint());
  EXPECT_EQ(read_bytes(folder.path() / "a.model"), read_bytes(folder.path() / "b.model"));
  // The fingerprint is the hash of the file's bytes, 16 hex digits.
  EXPECT_EQ(first.fingerprint(), content_hash_hex(read_bytes(folder.path() / "a.model")));
  EXPECT_EQ(first.fingerprint().size(), 16u);
  // Only the two model files remain: the atomic write left no temporary behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(folder.path()), fs::directory_iterator()), 2);

  const Tokenizer other =
      Tokenizer::train(small_corpus(400, /*salt=*/7), {.vocab_size = 400, .model_path = folder.path() / "c.model"});
  EXPECT_NE(other.fingerprint(), first.fingerprint());
}

class DataTokenizerTrained : public ::testing::Test {
 protected:
  // One tokenizer for the whole suite, because training dominates the cost; no test is running yet, so the
  // folder is named after the suite.
  static void SetUpTestSuite() {
    folder_ = new TempFolder("DataTokenizerTrained");
    tokenizer_ = new Tokenizer(Tokenizer::train(small_corpus(400), {.vocab_size = 400, .model_path = model_path()}));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete folder_;
  }
  static fs::path model_path() { return folder_->path() / "tok.model"; }
  static inline TempFolder* folder_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
};

TEST_F(DataTokenizerTrained, VocabularyAndSpecialIds) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.piece(tok.eos_id()), "</s>");
  EXPECT_EQ(tok.piece(0), "<unk>");
  EXPECT_EQ(tok.piece(2 + 0x41), "<0x41>");  // byte pieces follow the two specials
}

TEST_F(DataTokenizerTrained, OffsetsOfASentencePieceModelCoverTheTextInOrder) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_STREQ(tok.kind(), "sentencepiece");
  const std::string text = "the quick brown fox\njumps over 2024 dogs";
  const TokenizedText encoded = tok.encode_with_offsets(text);
  EXPECT_EQ(encoded.ids, tok.encode(text));
  ASSERT_EQ(encoded.offsets.size(), encoded.ids.size());
  // ASCII text: code points are bytes, and the pieces' spans, in order, spell the text.
  std::string spelled;
  int64_t at = 0;
  for (const CharOffsets& o : encoded.offsets) {
    EXPECT_EQ(o.begin, at);
    spelled += text.substr(o.begin, o.end - o.begin);
    at = o.end;
  }
  EXPECT_EQ(spelled, text);
}

TEST_F(DataTokenizerTrained, RoundTripsTextNeverSeenInTraining) {
  const Tokenizer& tok = *tokenizer_;
  const std::vector<std::string> texts = {
      "the quick brown fox jumps over the lazy dog.\n",
      "  leading spaces,   runs of spaces\tand tabs\n\n\nand blank lines\n",
      "Ünïcödé: naïve café, 日本語のテキスト, Ελληνικά, emoji 🎉🚀, math ∑∫√\n",
      std::string("control bytes \x01\x02\x7f and a NUL \0 inside", 37),
      "CRLF line\r\nend",
      "",
      "x",
  };
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tok.encode(text);
    for (const int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, tok.vocab_size());
      EXPECT_NE(id, 0) << "byte fallback should make <unk> unnecessary in: " << text;
    }
    EXPECT_EQ(tok.decode(ids), text);
  }
  // Training text compresses: fewer tokens than bytes.
  const std::string seen = "the quick brown fox jumps over the lazy dog.\n";
  EXPECT_LT(tok.encode(seen).size(), seen.size() / 2);
  // Unseen characters fall back to their UTF-8 bytes: one id per byte.
  EXPECT_EQ(tok.encode("日").size(), 3u);
}

TEST_F(DataTokenizerTrained, EndOfDocumentDecodesToNothing) {
  const Tokenizer& tok = *tokenizer_;
  std::vector<int32_t> ids = tok.encode("the dog.\n");
  ids.push_back(tok.eos_id());
  EXPECT_EQ(tok.decode(ids), "the dog.\n");
  for (const int32_t id : tok.encode("the dog.\n</s>\n")) EXPECT_NE(id, tok.eos_id()) << "the text '</s>' is not eos";
}

// token_bytes of a SentencePiece model: a text piece is its text with U+2581 as a space (what decode gives for it
// alone, the model having no dummy prefix), a byte piece its byte, control pieces nothing; laid end to end over
// encode(text) they are the text, byte for byte, also where text falls back to bytes.
TEST_F(DataTokenizerTrained, TokenBytesSpellTheTextByteForByte) {
  const Tokenizer& tok = *tokenizer_;
  int byte_pieces = 0, spaced_pieces = 0;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string bytes = tok.token_bytes(id);
    const std::string piece = tok.piece(id);
    if (id == 0 || id == tok.eos_id()) {
      EXPECT_TRUE(tok.is_special(id)) << piece;
      EXPECT_TRUE(bytes.empty()) << piece;
      continue;
    }
    EXPECT_FALSE(tok.is_special(id)) << piece;
    if (id >= 2 && id < 2 + 256) {  // <0x00>..<0xFF> follow the two specials
      ++byte_pieces;
      EXPECT_EQ(bytes, std::string(1, static_cast<char>(id - 2))) << piece;
      continue;
    }
    const int32_t one[] = {id};
    EXPECT_EQ(bytes, tok.decode(one)) << piece;
    if (piece.find("\xE2\x96\x81") != std::string::npos) {
      ++spaced_pieces;
      EXPECT_NE(bytes.find(' '), std::string::npos) << piece;
    }
  }
  EXPECT_EQ(byte_pieces, 256);
  EXPECT_GT(spaced_pieces, 10) << "pieces starting a word carry the space marker";
  std::vector<std::string> texts = {read_bytes(fs::path(RETORT_SOURCE_DIR) / "tests/data/hf/tokenizers/stress.txt")};
  for (const char* name : {"fortunes", "computers", "art"})
    texts.push_back(read_bytes(fs::path("/usr/share/games/fortunes") / name));
  texts.push_back(std::string("control bytes \x01\x02\x7f and a NUL \0 inside", 37));
  for (const std::string& text : texts) {
    ASSERT_FALSE(text.empty());
    std::string spelled;
    for (const int32_t id : tok.encode(text)) spelled += tok.token_bytes(id);
    EXPECT_TRUE(spelled == text) << "the tokens' bytes must be the text (" << text.size() << " bytes)";
  }
  EXPECT_THROW(tok.token_bytes(400), InputError);
}

TEST_F(DataTokenizerTrained, LoadGivesTheSameTokenizer) {
  const Tokenizer loaded = Tokenizer::load(model_path());
  EXPECT_EQ(loaded.fingerprint(), tokenizer_->fingerprint());
  EXPECT_EQ(loaded.vocab_size(), tokenizer_->vocab_size());
  const std::string text = "to be or not to be, that is the question 2024.\n";
  EXPECT_EQ(loaded.encode(text), tokenizer_->encode(text));
}

TEST_F(DataTokenizerTrained, DecodeRejectsIdsOutsideTheVocabulary) {
  const std::string message = message_of([&] { tokenizer_->decode(std::vector<int32_t>{5, 400}); });
  EXPECT_NE(message.find("token id 400"), std::string::npos) << message;
  EXPECT_NE(message.find("position 1"), std::string::npos) << message;
  EXPECT_THROW(tokenizer_->decode(std::vector<int32_t>{-1}), InputError);
}

TEST(DataTokenizer, LoadingSomethingElseIsAnError) {
  TempFolder folder;
  const fs::path bogus = folder.path() / "bogus.model";
  std::ofstream(bogus) << "not a model";
  const std::string message = message_of([&] { Tokenizer::load(bogus); });
  EXPECT_NE(message.find(bogus.string()), std::string::npos) << message;
  EXPECT_NE(message.find("not a SentencePiece model"), std::string::npos) << message;
  EXPECT_THROW(Tokenizer::load(folder.path() / "missing.model"), InputError);
}

TEST(DataTokenizer, VocabularyTooLargeForTheCorpusIsAnError) {
  TempFolder folder;
  const std::string message = message_of(
      [&] { Tokenizer::train(small_corpus(20), {.vocab_size = 5000, .model_path = folder.path() / "t.model"}); });
  EXPECT_NE(message.find("5000"), std::string::npos) << message;
  EXPECT_NE(message.find("lower the vocab size"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(folder.path() / "t.model"));
  EXPECT_THROW(Tokenizer::train(small_corpus(20), {.vocab_size = 100, .model_path = folder.path() / "t.model"}),
               InputError);
  EXPECT_THROW(
      Tokenizer::train(std::vector<std::string>{}, {.vocab_size = 400, .model_path = folder.path() / "t.model"}),
      InputError);
}

// A unigram tokenizer: the same exact vocabulary size, control ids and byte fallback as BPE, exact round trips, and
// another segmentation of the same text than BPE's.
TEST(DataTokenizer, UnigramTrainsRoundTripsAndCutsTextOtherwiseThanBpe) {
  TempFolder folder;
  // 340 ids: unigram's candidate pieces are substrings of the corpus' words, fewer than BPE can merge.
  const std::vector<std::string> corpus = small_corpus(400);
  const Tokenizer bpe = Tokenizer::train(corpus, {.vocab_size = 340, .model_path = folder.path() / "bpe.model"});
  const Tokenizer unigram = Tokenizer::train(
      corpus,
      {.vocab_size = 340, .model_path = folder.path() / "unigram.model", .model_type = TokenizerModelType::kUnigram});
  EXPECT_EQ(unigram.vocab_size(), 340);
  EXPECT_EQ(unigram.eos_id(), 1);
  EXPECT_EQ(unigram.piece(0), "<unk>");
  EXPECT_EQ(unigram.piece(2 + 0x41), "<0x41>");
  EXPECT_NE(unigram.fingerprint(), bpe.fingerprint());
  // Deterministic, as BPE is.
  const Tokenizer again = Tokenizer::train(
      corpus,
      {.vocab_size = 340, .model_path = folder.path() / "again.model", .model_type = TokenizerModelType::kUnigram});
  EXPECT_EQ(again.fingerprint(), unigram.fingerprint());

  const std::vector<std::string> texts = {
      "the quick brown fox jumps over the lazy dog.\n",
      "  leading spaces,   runs of spaces\tand tabs\n\n\nand blank lines\n",
      "Ünïcödé: naïve café, 日本語のテキスト, emoji 🎉🚀, math ∑∫√\n",
      std::string("control bytes \x01\x02\x7f and a NUL \0 inside", 37),
      "to be or not to be, that is the question 2024.\n",
  };
  size_t differing = 0;
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = unigram.encode(text);
    for (const int32_t id : ids) EXPECT_NE(id, 0) << "byte fallback leaves no <unk> in: " << text;
    EXPECT_EQ(unigram.decode(ids), text);
    std::string spelled;
    for (const int32_t id : ids) spelled += unigram.token_bytes(id);
    EXPECT_EQ(spelled, text);
    // Segmentations compared as the pieces' texts (the two vocabularies number their pieces differently).
    std::vector<std::string> unigram_pieces, bpe_pieces;
    for (const int32_t id : ids) unigram_pieces.push_back(unigram.token_bytes(id));
    for (const int32_t id : bpe.encode(text)) bpe_pieces.push_back(bpe.token_bytes(id));
    differing += unigram_pieces != bpe_pieces;
  }
  EXPECT_GE(differing, 2u) << "unigram and BPE must cut some texts differently";
  // The vocabularies differ too, not only the ids.
  std::set<std::string> bpe_vocab, unigram_vocab;
  for (int32_t id = 0; id < 340; ++id) bpe_vocab.insert(bpe.piece(id));
  for (int32_t id = 0; id < 340; ++id) unigram_vocab.insert(unigram.piece(id));
  EXPECT_NE(bpe_vocab, unigram_vocab);

  EXPECT_EQ(parse_tokenizer_model_type("unigram", "data.tokenizer_type"), TokenizerModelType::kUnigram);
  EXPECT_EQ(parse_tokenizer_model_type("bpe", "data.tokenizer_type"), TokenizerModelType::kBpe);
  const std::string message = message_of([] { parse_tokenizer_model_type("wordpiece", "data.tokenizer_type"); });
  EXPECT_NE(message.find("data.tokenizer_type = 'wordpiece'"), std::string::npos) << message;
  EXPECT_NE(message.find("bpe or unigram"), std::string::npos) << message;
}

TEST(DataTokenizer, LongDocumentsAreNotDropped) {
  // One document far longer than SentencePiece's sentence limit: its text must still shape the vocabulary.
  TempFolder folder;
  std::string long_document;
  while (long_document.size() < 100000) long_document += "zyzzyva quokka ";
  std::vector<std::string> corpus = small_corpus(50);
  corpus.push_back(long_document + "\n");
  const Tokenizer tok = Tokenizer::train(corpus, {.vocab_size = 320, .model_path = folder.path() / "t.model"});
  EXPECT_LE(tok.encode("zyzzyva quokka").size(), 3u);
}

}  // namespace
}  // namespace retort::data
