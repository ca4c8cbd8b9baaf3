// prepare_token_dataset: shards hold exactly the corpus's documents (each followed by eos), the split is by
// whole documents and seeded, and the manifest cache is reused only when its inputs match.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/data/corpus.h"
#include "core/data/dataset.h"
#include "core/data/token_shard.h"
#include "core/data/tokenizer.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort::data {
namespace {
namespace fs = std::filesystem;
using ::retort::testing::message_of;
using ::retort::testing::read_bytes;
using ::retort::testing::TempFolder;
using ::retort::testing::write_bytes;

// Documents with distinct, recognisable text: "entry <n>: ..." lines, in fortune format.
std::vector<std::string> numbered_documents(int count) {
  static const char* const kWords[] = {"apple", "river", "stone", "cloud", "ember", "maple", "quartz", "violet"};
  std::vector<std::string> documents;
  for (int n = 0; n < count; ++n) {
    std::string text = "entry " + std::to_string(n) + ":";
    for (int w = 0; w < 3 + n % 7; ++w) text += std::string(" ") + kWords[(n * 7 + w * 3) % 8];
    text += "\n";
    if (n % 3 == 0) text += "  a second line for " + std::to_string(n * 13) + "\n";
    documents.push_back(text);
  }
  return documents;
}

void write_fortune_file(const fs::path& path, const std::vector<std::string>& documents) {
  std::ofstream out(path, std::ios::binary);
  for (const std::string& document : documents) out << document << "%\n";
}

// Decodes every shard of a split and cuts the stream at eos: the documents the split holds, in order.
std::vector<std::string> documents_in(const std::vector<fs::path>& shards, const Tokenizer& tokenizer,
                                      int64_t* token_count) {
  std::vector<int32_t> stream;
  for (const fs::path& path : shards) {
    const TokenShard shard = TokenShard::open(path, tokenizer.vocab_size());
    const std::vector<int32_t> tokens = shard.read(0, shard.size());
    stream.insert(stream.end(), tokens.begin(), tokens.end());
  }
  *token_count = static_cast<int64_t>(stream.size());
  std::vector<std::string> documents;
  std::vector<int32_t> current;
  for (const int32_t id : stream) {
    if (id == tokenizer.eos_id()) {
      documents.push_back(tokenizer.decode(current));
      current.clear();
    } else {
      current.push_back(id);
    }
  }
  EXPECT_TRUE(current.empty()) << "a split must end with eos";
  return documents;
}

class DataDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_dir_ = folder_.path() / "corpus";
    fs::create_directories(corpus_dir_);
    documents_ = numbered_documents(300);
    write_fortune_file(corpus_dir_ / "a", std::vector<std::string>(documents_.begin(), documents_.begin() + 200));
    write_fortune_file(corpus_dir_ / "b", std::vector<std::string>(documents_.begin() + 200, documents_.end()));
    options_ = {.corpus = corpus_dir_.string(),
                .data_dir = folder_.path() / "data",
                .vocab_size = 320,
                .val_fraction = 0.2,
                .seed = 3,
                .shard_tokens = 2000};
  }
  TempFolder folder_;
  fs::path corpus_dir_;
  std::vector<std::string> documents_;
  DatasetOptions options_;
};

TEST_F(DataDataset, ShardsHoldEveryDocumentOnceSplitByWholeDocuments) {
  const PreparedDataset data = prepare_token_dataset(options_);
  EXPECT_FALSE(data.reused_tokenizer);
  EXPECT_EQ(data.vocab_size, 320);
  const Tokenizer tokenizer = Tokenizer::load(data.tokenizer_path);
  EXPECT_EQ(tokenizer.fingerprint(), data.tokenizer_fingerprint);

  ASSERT_GE(data.train_shards.size(), 2u) << "shard_tokens 2000 should force several train shards";
  for (size_t i = 0; i < data.train_shards.size(); ++i) {
    EXPECT_EQ(data.train_shards[i], options_.data_dir / shard_file_name("train", static_cast<int64_t>(i)));
    EXPECT_LE(TokenShard::open(data.train_shards[i], 320).size(), 2000);
  }
  EXPECT_EQ(data.train_shards[0].filename(), "train_000.bin");
  ASSERT_FALSE(data.val_shards.empty());
  EXPECT_EQ(data.val_shards[0].filename(), "val_000.bin");

  int64_t train_tokens = 0, val_tokens = 0;
  const std::vector<std::string> train = documents_in(data.train_shards, tokenizer, &train_tokens);
  const std::vector<std::string> val = documents_in(data.val_shards, tokenizer, &val_tokens);
  EXPECT_EQ(train_tokens, data.train_tokens);
  EXPECT_EQ(val_tokens, data.val_tokens);
  EXPECT_EQ(static_cast<int64_t>(train.size()), data.train_documents);
  EXPECT_EQ(static_cast<int64_t>(val.size()), data.val_documents);

  // Together the splits are exactly the corpus, each document once.
  std::vector<std::string> all = train;
  all.insert(all.end(), val.begin(), val.end());
  std::sort(all.begin(), all.end());
  std::vector<std::string> expected = documents_;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);

  // Validation holds about val_fraction of the tokens: at least the target, and less one document below it.
  const double fraction = static_cast<double>(val_tokens) / static_cast<double>(train_tokens + val_tokens);
  EXPECT_GE(fraction, 0.2 - 1e-9);
  EXPECT_LT(fraction, 0.2 + 30.0 / static_cast<double>(train_tokens + val_tokens));
  // Shuffled, not the corpus order.
  EXPECT_NE(std::vector<std::string>(train.begin(), train.begin() + 10),
            std::vector<std::string>(documents_.begin(), documents_.begin() + 10));
}

TEST_F(DataDataset, SameInputsReuseTheCache) {
  const PreparedDataset first = prepare_token_dataset(options_);
  const std::string shard_bytes = read_bytes(first.train_shards[0]);
  const auto model_time = fs::last_write_time(first.tokenizer_path);
  const PreparedDataset second = prepare_token_dataset(options_);
  EXPECT_TRUE(second.reused_tokenizer);
  EXPECT_TRUE(second.reused_shards);
  EXPECT_EQ(second.tokenizer_fingerprint, first.tokenizer_fingerprint);
  EXPECT_EQ(second.train_shards, first.train_shards);
  EXPECT_EQ(second.val_shards, first.val_shards);
  EXPECT_EQ(second.train_tokens, first.train_tokens);
  EXPECT_EQ(second.val_documents, first.val_documents);
  EXPECT_EQ(fs::last_write_time(first.tokenizer_path), model_time);
  EXPECT_EQ(read_bytes(second.train_shards[0]), shard_bytes);

  const auto manifest = nlohmann::json::parse(read_bytes(options_.data_dir / "manifest.json"));
  EXPECT_EQ(manifest.at("tokenizer_fingerprint"), first.tokenizer_fingerprint);
  EXPECT_EQ(manifest.at("corpus").at("files").size(), 2u);
}

TEST_F(DataDataset, ChangedSplitSettingsKeepTheTokenizerAndRemoveStaleShards) {
  const PreparedDataset first = prepare_token_dataset(options_);
  ASSERT_GE(first.train_shards.size(), 2u);
  options_.shard_tokens = 1000000;
  options_.val_fraction = 0.1;
  const PreparedDataset second = prepare_token_dataset(options_);
  EXPECT_TRUE(second.reused_tokenizer);
  EXPECT_FALSE(second.reused_shards);
  EXPECT_EQ(second.tokenizer_fingerprint, first.tokenizer_fingerprint);
  ASSERT_EQ(second.train_shards.size(), 1u);
  EXPECT_FALSE(fs::exists(options_.data_dir / "train_001.bin")) << "stale shard from the first build";
  EXPECT_LT(second.val_tokens, first.val_tokens);

  // A new seed is a new split of the same corpus: same tokenizer, new shards.
  options_.seed = 99;
  const PreparedDataset reseeded = prepare_token_dataset(options_);
  EXPECT_TRUE(reseeded.reused_tokenizer);
  EXPECT_FALSE(reseeded.reused_shards);
  EXPECT_TRUE(prepare_token_dataset(options_).reused_shards);
}

TEST_F(DataDataset, AnotherCorpusOrVocabIsRefusedAndTheFolderKept) {
  const PreparedDataset first = prepare_token_dataset(options_);
  const std::string tokenizer_bytes = read_bytes(first.tokenizer_path);
  const std::string manifest_bytes = read_bytes(options_.data_dir / "manifest.json");
  const std::string shard_bytes = read_bytes(first.val_shards[0]);
  const auto folder_unchanged = [&] {
    EXPECT_EQ(read_bytes(first.tokenizer_path), tokenizer_bytes);
    EXPECT_EQ(read_bytes(options_.data_dir / "manifest.json"), manifest_bytes);
    EXPECT_EQ(read_bytes(first.val_shards[0]), shard_bytes);
  };

  // Another corpus: the message names the folder, the old and the new corpus, and the fix.
  const fs::path other_corpus = folder_.path() / "other.txt";
  write_fortune_file(other_corpus, numbered_documents(40));
  DatasetOptions other = options_;
  other.corpus = other_corpus.string();
  std::string message = message_of([&] { prepare_token_dataset(other); });
  EXPECT_NE(message.find("the data folder '" + options_.data_dir.string() + "' was made from other data"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("made from corpus '" + corpus_dir_.string() + "' (2 files), this config gives '" +
                         other_corpus.string() + "' (1 files)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("set data.dir to a new folder (e.g. data.dir=" + (folder_.path() / "other").string() + ")"),
            std::string::npos)
      << message;
  folder_unchanged();

  // The same corpus spec whose file changed: the file is named.
  std::ofstream(corpus_dir_ / "b", std::ios::app) << "a brand new fortune about zebras\n%\n";
  message = message_of([&] { prepare_token_dataset(options_); });
  EXPECT_NE(message.find("'" + (corpus_dir_ / "b").string() + "' changed"), std::string::npos) << message;
  folder_unchanged();

  // Another vocabulary size.
  write_fortune_file(corpus_dir_ / "b", std::vector<std::string>(documents_.begin() + 200, documents_.end()));
  options_.vocab_size = 330;
  message = message_of([&] { prepare_token_dataset(options_); });
  EXPECT_NE(message.find("its vocab size is 320, this config asks for 330"), std::string::npos) << message;
  folder_unchanged();

  // The suggested folder works and leaves the first alone.
  other.data_dir = folder_.path() / "other";
  const PreparedDataset second = prepare_token_dataset(other);
  EXPECT_NE(second.tokenizer_fingerprint, first.tokenizer_fingerprint);
  folder_unchanged();
}

// data.tokenizer_type is part of what a folder was made from: a BPE folder is not reused for unigram, nor the other
// way round, and a unigram folder is reused for unigram.
TEST_F(DataDataset, AFolderMadeWithOneTokenizerTypeIsRefusedForTheOther) {
  options_.vocab_size = 300;  // unigram finds fewer candidate pieces in this small corpus than BPE
  const PreparedDataset bpe = prepare_token_dataset(options_);
  DatasetOptions unigram = options_;
  unigram.tokenizer_type = TokenizerModelType::kUnigram;
  std::string message = message_of([&] { prepare_token_dataset(unigram); });
  EXPECT_NE(message.find("its tokenizer is a bpe tokenizer, this config asks for data.tokenizer_type=unigram"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("data.dir=" + (folder_.path() / "corpus").string() + "-unigram"), std::string::npos)
      << message;

  unigram.data_dir = folder_.path() / "unigram";
  const PreparedDataset made = prepare_token_dataset(unigram);
  EXPECT_NE(made.tokenizer_fingerprint, bpe.tokenizer_fingerprint);
  EXPECT_EQ(made.vocab_size, 300);
  EXPECT_TRUE(prepare_token_dataset(unigram).reused_shards);
  DatasetOptions back = unigram;
  back.tokenizer_type = TokenizerModelType::kBpe;
  message = message_of([&] { prepare_token_dataset(back); });
  EXPECT_NE(message.find("its tokenizer is a unigram tokenizer, this config asks for data.tokenizer_type=bpe"),
            std::string::npos)
      << message;
  // The documents come back exactly through the unigram tokenizer too.
  const Tokenizer tokenizer = Tokenizer::load(made.tokenizer_path);
  int64_t tokens = 0;
  std::vector<std::string> decoded = documents_in(made.train_shards, tokenizer, &tokens);
  const std::vector<std::string> val = documents_in(made.val_shards, tokenizer, &tokens);
  decoded.insert(decoded.end(), val.begin(), val.end());
  std::vector<std::string> expected = documents_;
  std::sort(decoded.begin(), decoded.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(decoded, expected);
}

TEST_F(DataDataset, AReplacedOrMissingTokenizerIsRefusedNotRetrained) {
  const PreparedDataset first = prepare_token_dataset(options_);
  const std::string original = read_bytes(first.tokenizer_path);
  DatasetOptions elsewhere = options_;
  elsewhere.data_dir = folder_.path() / "elsewhere";
  elsewhere.vocab_size = 330;
  write_bytes(first.tokenizer_path, read_bytes(prepare_token_dataset(elsewhere).tokenizer_path));
  std::string message = message_of([&] { prepare_token_dataset(options_); });
  EXPECT_NE(message.find("is not the tokenizer the data folder was made with"), std::string::npos) << message;
  fs::remove(first.tokenizer_path);
  message = message_of([&] { prepare_token_dataset(options_); });
  EXPECT_NE(message.find("lost its tokenizer"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(first.tokenizer_path));
  write_bytes(first.tokenizer_path, original);
  EXPECT_TRUE(prepare_token_dataset(options_).reused_shards);
}

TEST_F(DataDataset, AnInterruptedShardRebuildKeepsTheTokenizer) {
  const PreparedDataset first = prepare_token_dataset(options_);
  // What a rebuild leaves when stopped between the tokenizer and the shards: a manifest without splits.
  auto manifest = nlohmann::json::parse(read_bytes(options_.data_dir / "manifest.json"));
  manifest.erase("train");
  manifest.erase("val");
  manifest.erase("split");
  write_bytes(options_.data_dir / "manifest.json", manifest.dump());
  const auto model_time = fs::last_write_time(first.tokenizer_path);
  const PreparedDataset again = prepare_token_dataset(options_);
  EXPECT_TRUE(again.reused_tokenizer);
  EXPECT_FALSE(again.reused_shards);
  EXPECT_EQ(again.train_tokens, first.train_tokens);
  EXPECT_EQ(fs::last_write_time(first.tokenizer_path), model_time);
}

TEST_F(DataDataset, AGivenTokenizerIsUsedAsItIs) {
  // A SentencePiece model made elsewhere (here: by retort on other text), given as data.tokenizer.
  const fs::path given = folder_.path() / "given.model";
  Tokenizer::train(numbered_documents(60), {.vocab_size = 300, .model_path = given});
  const Tokenizer reference = Tokenizer::load(given);
  options_.tokenizer = given;
  options_.vocab_size = 300;
  const PreparedDataset data = prepare_token_dataset(options_);
  EXPECT_EQ(data.tokenizer_fingerprint, reference.fingerprint());
  EXPECT_EQ(read_bytes(data.tokenizer_path), read_bytes(given));
  EXPECT_EQ(data.vocab_size, 300);
  // The shards hold the given tokenizer's ids of the corpus, each document once.
  int64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::string> all = documents_in(data.train_shards, reference, &train_tokens);
  const std::vector<std::string> val = documents_in(data.val_shards, reference, &val_tokens);
  all.insert(all.end(), val.begin(), val.end());
  std::sort(all.begin(), all.end());
  std::vector<std::string> expected = documents_;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
  int64_t expected_tokens = 0;
  for (const std::string& document : documents_) expected_tokens += reference.encode(document).size() + 1;
  EXPECT_EQ(train_tokens + val_tokens, expected_tokens);
  EXPECT_TRUE(prepare_token_dataset(options_).reused_shards);

  // The folder now belongs to that tokenizer: training one instead is refused.
  DatasetOptions trained = options_;
  trained.tokenizer.clear();
  std::string message = message_of([&] { prepare_token_dataset(trained); });
  EXPECT_NE(message.find("it uses the tokenizer file '" + given.string()), std::string::npos) << message;
  EXPECT_NE(message.find("this config gives a tokenizer trained on the corpus"), std::string::npos) << message;

  // A vocabulary size that disagrees with the file says which to set.
  DatasetOptions mismatch = options_;
  mismatch.data_dir = folder_.path() / "mismatch";
  mismatch.vocab_size = 8192;
  message = message_of([&] { prepare_token_dataset(mismatch); });
  EXPECT_NE(message.find("has 300 ids but data.vocab_size is 8192: set data.vocab_size=300"), std::string::npos)
      << message;
  // SentencePiece .model and tokenizer.json files are read; other types are refused, naming both.
  write_bytes(folder_.path() / "vocab.txt", "{}");
  mismatch.tokenizer = folder_.path() / "vocab.txt";
  message = message_of([&] { prepare_token_dataset(mismatch); });
  EXPECT_NE(message.find("give a SentencePiece .model file or a Hugging Face tokenizer.json"), std::string::npos)
      << message;
  mismatch.tokenizer = folder_.path() / "missing.model";
  message = message_of([&] { prepare_token_dataset(mismatch); });
  EXPECT_NE(message.find("'" + mismatch.tokenizer.string() + "' does not exist"), std::string::npos) << message;
}

TEST_F(DataDataset, AGivenTokenizerJsonIsKeptAsTokenizerJsonAndEndsDocumentsWithItsEos) {
  // A GPT-2 style byte-level BPE made by Hugging Face tokenizers (384 ids, <|endoftext|> = 0).
  const fs::path given = fs::path(RETORT_SOURCE_DIR) / "tests/data/hf/tokenizers/tiny_gpt2_style/tokenizer.json";
  const Tokenizer reference = Tokenizer::load(given);
  ASSERT_EQ(reference.eos_id(), 0);
  options_.tokenizer = given;
  options_.vocab_size = 384;
  const PreparedDataset data = prepare_token_dataset(options_);
  EXPECT_EQ(data.tokenizer_path.filename(), "tokenizer.json");
  EXPECT_EQ(read_bytes(data.tokenizer_path), read_bytes(given));
  EXPECT_EQ(data.tokenizer_fingerprint, reference.fingerprint());
  EXPECT_EQ(nlohmann::json::parse(read_bytes(options_.data_dir / "manifest.json")).at("tokenizer"), "tokenizer.json");
  int64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::string> all = documents_in(data.train_shards, reference, &train_tokens);
  const std::vector<std::string> val = documents_in(data.val_shards, reference, &val_tokens);
  all.insert(all.end(), val.begin(), val.end());
  std::sort(all.begin(), all.end());
  std::vector<std::string> expected = documents_;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
  int64_t expected_tokens = 0;
  for (const std::string& document : documents_) expected_tokens += reference.encode(document).size() + 1;
  EXPECT_EQ(train_tokens + val_tokens, expected_tokens);
  // The folder's copy is found again under its recorded name.
  const PreparedDataset again = prepare_token_dataset(options_);
  EXPECT_TRUE(again.reused_shards);
  EXPECT_EQ(again.tokenizer_path, data.tokenizer_path);
}

TEST_F(DataDataset, ZeroValFractionMeansNoValidationSplit) {
  options_.val_fraction = 0.0;
  const PreparedDataset data = prepare_token_dataset(options_);
  EXPECT_TRUE(data.val_shards.empty());
  EXPECT_EQ(data.val_tokens, 0);
  EXPECT_EQ(data.train_documents, 300);
  // A one-paragraph corpus trains with val_fraction 0, and the error without it gives that advice.
  const fs::path one = folder_.path() / "one.txt";
  std::string paragraph;
  for (const std::string& document : documents_) paragraph += document;  // no blank or '%' line: one document
  write_bytes(one, paragraph);
  DatasetOptions single{.corpus = one.string(), .data_dir = folder_.path() / "single", .vocab_size = 320};
  const std::string message = message_of([&] { prepare_token_dataset(single); });
  EXPECT_NE(message.find("set data.val_fraction=0"), std::string::npos) << message;
  single.val_fraction = 0.0;
  const PreparedDataset small = prepare_token_dataset(single);
  EXPECT_EQ(small.train_documents, 1);
  EXPECT_TRUE(small.val_shards.empty());
}

TEST_F(DataDataset, JsonlCorpusTokenizesTheTextField) {
  std::string jsonl;
  for (const std::string& document : documents_) jsonl += nlohmann::json{{"body", document}, {"id", 1}}.dump() + "\n";
  const fs::path corpus = folder_.path() / "corpus.jsonl";
  write_bytes(corpus, jsonl);
  options_.corpus = corpus.string();
  options_.text_field = "body";
  const PreparedDataset data = prepare_token_dataset(options_);
  const Tokenizer tokenizer = Tokenizer::load(data.tokenizer_path);
  int64_t tokens = 0;
  std::vector<std::string> all = documents_in(data.train_shards, tokenizer, &tokens);
  const std::vector<std::string> val = documents_in(data.val_shards, tokenizer, &tokens);
  all.insert(all.end(), val.begin(), val.end());
  std::sort(all.begin(), all.end());
  std::vector<std::string> expected = documents_;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
  // The field is part of what the folder was made from.
  options_.text_field = "text";
  const std::string message = message_of([&] { prepare_token_dataset(options_); });
  EXPECT_NE(message.find("its JSON-lines text field is \"body\", this config gives \"text\""), std::string::npos)
      << message;
}

TEST_F(DataDataset, SplitDependsOnlyOnTheSeed) {
  const PreparedDataset first = prepare_token_dataset(options_);
  DatasetOptions same = options_;
  same.data_dir = folder_.path() / "same";
  const PreparedDataset again = prepare_token_dataset(same);
  EXPECT_EQ(read_bytes(again.val_shards[0]), read_bytes(first.val_shards[0]));
  EXPECT_EQ(again.tokenizer_fingerprint, first.tokenizer_fingerprint);

  DatasetOptions other = options_;
  other.data_dir = folder_.path() / "other";
  other.seed = 4;
  const PreparedDataset reseeded = prepare_token_dataset(other);
  EXPECT_NE(read_bytes(reseeded.val_shards[0]), read_bytes(first.val_shards[0]));
}

TEST_F(DataDataset, BadOptionsAreErrors) {
  DatasetOptions bad = options_;
  bad.val_fraction = 1.0;
  EXPECT_THROW(prepare_token_dataset(bad), InputError);
  bad = options_;
  bad.corpus = (folder_.path() / "nothing*.txt").string();
  const std::string message = message_of([&] { prepare_token_dataset(bad); });
  EXPECT_NE(message.find(bad.corpus), std::string::npos) << message;
  bad = options_;
  bad.data_dir.clear();
  EXPECT_THROW(prepare_token_dataset(bad), InputError);
}

TEST(DataDatasetFortunes, EndToEndOnTheDefaultCorpus) {
  if (!fs::is_directory(kDefaultCorpus)) GTEST_SKIP() << "Debian's fortunes package is not installed";
  TempFolder folder;
  const PreparedDataset data = prepare_token_dataset({.data_dir = folder.path(), .vocab_size = 1024});
  EXPECT_EQ(data.vocab_size, 1024);
  ASSERT_EQ(data.train_shards.size(), 1u);
  ASSERT_EQ(data.val_shards.size(), 1u);
  EXPECT_GT(data.train_tokens, 500000);
  EXPECT_GT(data.val_documents, 100);
  const double fraction =
      static_cast<double>(data.val_tokens) / static_cast<double>(data.train_tokens + data.val_tokens);
  EXPECT_NEAR(fraction, 0.05, 0.005);

  // Decoding the shards gives back fortune entries verbatim, and BPE compresses them.
  const Tokenizer tokenizer = Tokenizer::load(data.tokenizer_path);
  int64_t val_tokens = 0;
  const std::vector<std::string> val = documents_in(data.val_shards, tokenizer, &val_tokens);
  EXPECT_EQ(static_cast<int64_t>(val.size()), data.val_documents);
  const std::vector<std::string> corpus = read_documents(resolve_corpus(kDefaultCorpus));
  const std::set<std::string> corpus_set(corpus.begin(), corpus.end());
  size_t val_bytes = 0;
  for (const std::string& document : val) {
    EXPECT_TRUE(corpus_set.count(document)) << "not a fortune: " << document;
    val_bytes += document.size();
  }
  EXPECT_LT(static_cast<double>(val_tokens), 0.5 * static_cast<double>(val_bytes));
}

}  // namespace
}  // namespace retort::data
