// The paired token streams: the teacher's tokens of the student's text, byte for byte, with every token's byte
// position; made once, reused, made again when its inputs change or a file is damaged; a lossy pair refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/corpus.h"
#include "core/data/token_shard.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "distill/xtoken/paired_stream.h"
#include "tests/distill/train/training_run_support.h"

namespace retort::distill::xtoken {
namespace {

namespace fs = std::filesystem;

// Fortunes documents plus text with numbers and characters outside ASCII (some of them rare enough to fall back
// to bytes in a small vocabulary).
std::vector<std::string> documents() {
  static const std::vector<std::string> docs = [] {
    std::vector<std::string> d = data::read_documents({"/usr/share/games/fortunes/computers"});
    d.resize(std::min<size_t>(d.size(), 60));
    d.push_back("Prices rose 3.75% in 2023, from 1,024 to 1,062 units: 12345 + 67890 = 80235.");
    d.push_back("Caf\xc3\xa9 na\xc3\xafve \xe2\x98\x83 \xe2\x80\x94 \xf0\x9f\x99\x82 done.");
    d.push_back("");
    return d;
  }();
  return docs;
}

data::Tokenizer train_tokenizer(const fs::path& dir, int64_t vocab) {
  data::TokenizerTrainOptions options;
  options.vocab_size = vocab;
  options.model_path = dir / fmt::format("sp{}.model", vocab);
  if (fs::exists(options.model_path)) return data::Tokenizer::load(options.model_path);
  return data::Tokenizer::train(documents(), options);
}

// The student's shards: every document's ids and its end-of-document id, the last few documents in a second split.
struct StudentData {
  fs::path train, val;
  std::vector<std::string> train_docs, val_docs;
};
StudentData write_student_shards(const data::Tokenizer& student, const fs::path& dir) {
  StudentData out;
  fs::create_directories(dir);
  std::vector<int32_t> train, val;
  const std::vector<std::string> docs = documents();
  for (size_t i = 0; i < docs.size(); ++i) {
    const bool is_val = i % 10 == 3;
    std::vector<int32_t>& stream = is_val ? val : train;
    (is_val ? out.val_docs : out.train_docs).push_back(docs[i]);
    const std::vector<int32_t> ids = student.encode(docs[i]);
    stream.insert(stream.end(), ids.begin(), ids.end());
    stream.push_back(student.eos_id());
  }
  out.train = dir / "train_000.bin";
  out.val = dir / "val_000.bin";
  data::write_token_shard(out.train, train, student.vocab_size());
  data::write_token_shard(out.val, val, student.vocab_size());
  return out;
}

struct Fixture {
  fs::path dir = distill::testing::fresh_dir("xtoken_paired_stream");
  data::Tokenizer student = train_tokenizer(dir, 400);
  data::Tokenizer teacher = train_tokenizer(dir, 700);
  StudentData shards = write_student_shards(student, dir);

  PairedStreamRequest request(const data::Tokenizer& t) const {
    return {dir / "paired", {shards.train}, {shards.val}, student.vocab_size(), &student, &t};
  }
};

// The checks every split must pass, against the original documents and the teacher's own encoding of each.
void expect_paired(const PairedSplit& split, const std::vector<std::string>& docs, const data::Tokenizer& teacher) {
  ASSERT_EQ(split.student_documents.size(), docs.size() + 1);
  ASSERT_EQ(split.teacher_documents.size(), docs.size() + 1);
  int64_t byte = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    const auto t0 = static_cast<size_t>(split.teacher_documents[d]),
               t1 = static_cast<size_t>(split.teacher_documents[d + 1]);
    const auto s0 = static_cast<size_t>(split.student_documents[d]),
               s1 = static_cast<size_t>(split.student_documents[d + 1]);
    std::vector<int32_t> expected = teacher.encode(docs[d]);
    expected.push_back(teacher.eos_id());
    EXPECT_EQ(std::vector<int32_t>(split.teacher_tokens.begin() + t0, split.teacher_tokens.begin() + t1), expected)
        << "document " << d;
    // The document's tokens start where the text before it ends and end where its own text ends, on both sides.
    EXPECT_EQ(split.teacher_offsets[t0], byte) << "document " << d;
    EXPECT_EQ(split.student_offsets[s0], byte) << "document " << d;
    byte += static_cast<int64_t>(docs[d].size());
    EXPECT_EQ(split.teacher_offsets[t1 - 1], byte) << "document " << d;  // the end-of-document id's empty span
    EXPECT_EQ(split.teacher_offsets[t1], byte);
    EXPECT_EQ(split.student_offsets[s1], byte);
    // Each token's span is the length of its text: one teacher token at a time decoded against the document.
    std::string rebuilt;
    for (size_t t = t0; t + 1 < t1; ++t) {
      const int64_t begin = split.teacher_offsets[t] - split.teacher_offsets[t0];
      const int64_t end = split.teacher_offsets[t + 1] - split.teacher_offsets[t0];
      ASSERT_LE(begin, end);
      rebuilt += docs[d].substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
    }
    EXPECT_EQ(rebuilt, docs[d]);
    EXPECT_EQ(teacher.decode(std::vector<int32_t>(expected.begin(), expected.end() - 1)), docs[d]);
  }
  EXPECT_EQ(split.bytes(), byte);
  EXPECT_EQ(split.teacher_offsets.back(), byte);
}

TEST(PairedStream, TheTeachersTokensStandForTheStudentsTextByteForByte) {
  const Fixture f;
  ASSERT_NE(f.student.fingerprint(), f.teacher.fingerprint());
  const PairedStream stream = load_or_build_paired_stream(f.request(f.teacher));
  EXPECT_FALSE(stream.reused);
  expect_paired(stream.train, f.shards.train_docs, f.teacher);
  expect_paired(stream.val, f.shards.val_docs, f.teacher);
  // The two tokenizers cut the text differently (else this test would prove little).
  EXPECT_NE(stream.train.student_tokens.size(), stream.train.teacher_tokens.size());
  // The teacher's shard on disk holds the same tokens.
  const data::TokenShard shard = data::TokenShard::open(stream.train.teacher_shard, f.teacher.vocab_size());
  ASSERT_EQ(shard.size(), static_cast<int64_t>(stream.train.teacher_tokens.size()));
  for (int64_t i = 0; i < shard.size(); ++i)
    ASSERT_EQ(shard.token(i), stream.train.teacher_tokens[static_cast<size_t>(i)]);
}

TEST(PairedStream, IsReusedWhileItsInputsStayAndMadeAgainWhenTheyChangeOrAFileIsDamaged) {
  const Fixture f;
  const PairedStream first = load_or_build_paired_stream(f.request(f.teacher));
  const PairedStream again = load_or_build_paired_stream(f.request(f.teacher));
  EXPECT_TRUE(again.reused);
  EXPECT_EQ(again.train.teacher_tokens, first.train.teacher_tokens);
  EXPECT_EQ(again.train.teacher_offsets, first.train.teacher_offsets);
  EXPECT_EQ(again.val.student_offsets, first.val.student_offsets);

  // A damaged offsets file: made again, with the same content.
  {
    const fs::path file = f.dir / "paired" / "teacher_train.offsets";
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(16);
    io.put('\x7f');
  }
  const PairedStream repaired = load_or_build_paired_stream(f.request(f.teacher));
  EXPECT_FALSE(repaired.reused);
  EXPECT_EQ(repaired.train.teacher_offsets, first.train.teacher_offsets);

  // Another teacher tokenizer: made again for it.
  const data::Tokenizer other = train_tokenizer(f.dir, 500);
  const PairedStream rebuilt = load_or_build_paired_stream(f.request(other));
  EXPECT_FALSE(rebuilt.reused);
  expect_paired(rebuilt.train, f.shards.train_docs, other);
  const nlohmann::json manifest = nlohmann::json::parse(read_file(f.dir / "paired" / kPairedStreamManifest));
  EXPECT_EQ(manifest.at("teacher_tokenizer").get<std::string>(), other.fingerprint());

  // Other student shards (one document less): made again.
  std::vector<int32_t> fewer;
  {
    const data::TokenShard shard = data::TokenShard::open(f.shards.train, f.student.vocab_size());
    fewer.resize(static_cast<size_t>(shard.size()));
    shard.copy_to(0, fewer);
  }
  fewer.resize(static_cast<size_t>(std::find(fewer.begin(), fewer.end(), f.student.eos_id()) - fewer.begin() + 1));
  data::write_token_shard(f.shards.train, fewer, f.student.vocab_size());
  const PairedStream one_document = load_or_build_paired_stream(f.request(other));
  EXPECT_FALSE(one_document.reused);
  expect_paired(one_document.train, {f.shards.train_docs[0]}, other);
}

TEST(PairedStream, AByteLevelTokenizerJsonTeacherPairsWithASentencePieceStudent) {
  const Fixture f;
  // Byte-level BPE: a character outside ASCII is one to four tokens, each of some of its bytes.
  const data::Tokenizer teacher =
      data::Tokenizer::load(fs::path(RETORT_SOURCE_DIR) / "tests/data/hf/tokenizers/tiny_gpt2_style/tokenizer.json");
  const PairedStream stream = load_or_build_paired_stream(f.request(teacher));
  expect_paired(stream.train, f.shards.train_docs, teacher);
  expect_paired(stream.val, f.shards.val_docs, teacher);
}

TEST(PairedStream, ATeacherTokenizerThatChangesTheTextIsRefusedNamingTheDocument) {
  const fs::path dir = distill::testing::fresh_dir("xtoken_lossy_pair");
  // A byte-level BPE tokenizer.json that composes characters (NFC): "e" + U+0301 comes back as U+00E9.
  nlohmann::json json = nlohmann::json::parse(
      read_file(fs::path(RETORT_SOURCE_DIR) / "tests/data/hf/tokenizers/tiny_gpt2_style/tokenizer.json"));
  json["normalizer"] = {{"type", "NFC"}};
  fs::create_directories(dir / "nfc");
  write_text_atomic(dir / "nfc" / "tokenizer.json", json.dump());
  const data::Tokenizer teacher = data::Tokenizer::load(dir / "nfc" / "tokenizer.json");
  const data::Tokenizer student = train_tokenizer(dir, 400);
  fs::create_directories(dir);
  std::vector<int32_t> tokens;
  for (const std::string& doc : {std::string("plain text first"), std::string("then cafe\xcc\x81 au lait")}) {
    const std::vector<int32_t> ids = student.encode(doc);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(student.eos_id());
  }
  data::write_token_shard(dir / "train_000.bin", tokens, student.vocab_size());
  try {
    load_or_build_paired_stream(
        {dir / "paired", {dir / "train_000.bin"}, {}, student.vocab_size(), &student, &teacher});
    FAIL() << "a lossy teacher tokenizer was accepted";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("document 1 of the train split"), std::string::npos) << message;
    EXPECT_NE(message.find("at byte 8"), std::string::npos) << message;  // "then caf" is 8 bytes, then e / U+00E9
    EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(dir / "paired" / kPairedStreamManifest));
}

}  // namespace
}  // namespace retort::distill::xtoken
