// Pre-tokenized llm.c shards used as they are: shards written byte by byte in llm.c's format (and, where numpy is
// installed, by an independent Python writer following llm.c's data_common.py layout) are read through the same
// loader training uses; ids outside the vocabulary, missing files and overlapping patterns are errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/data/pretokenized_dataset.h"
#include "core/data/token_shard.h"
#include "core/data/tokenizer.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort::data {
namespace {
namespace fs = std::filesystem;
using ::retort::testing::message_of;
using ::retort::testing::TempFolder;
using ::retort::testing::write_bytes;

// llm.c's layout written by hand, not through write_token_shard: 256 little-endian int32 (magic, version, count,
// zeros), then the tokens as uint16 (version 1) or uint32 (llm.c's magic 20240801, version 7).
void write_llmc_shard(const fs::path& path, const std::vector<uint32_t>& tokens, bool wide = false) {
  std::string bytes(1024, '\0');
  const int32_t header[3] = {wide ? 20240801 : 20240520, wide ? 7 : 1, static_cast<int32_t>(tokens.size())};
  std::memcpy(bytes.data(), header, sizeof(header));
  for (const uint32_t token : tokens) {
    for (int b = 0; b < (wide ? 4 : 2); ++b) bytes.push_back(static_cast<char>((token >> (8 * b)) & 0xFF));
  }
  write_bytes(path, bytes);
}

std::vector<uint32_t> counting_tokens(uint32_t first, size_t count, uint32_t modulo) {
  std::vector<uint32_t> tokens(count);
  for (size_t i = 0; i < count; ++i) tokens[i] = (first + static_cast<uint32_t>(i) * 7) % modulo;
  return tokens;
}

// Every token of every window a loader gives in one eval pass, in order.
std::vector<int32_t> loader_stream(const std::vector<fs::path>& shards, int64_t vocab, int64_t seq_len) {
  TokenLoader loader(shards, vocab, {.batch_size = 1, .seq_len = seq_len, .mode = LoaderMode::kEval});
  std::vector<int32_t> stream;
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    const TokenBatch batch = loader.next();
    stream.insert(stream.end(), batch.inputs.begin(), batch.inputs.end());
    stream.push_back(batch.targets.back());
  }
  return stream;
}

TEST(DataPretokenized, LlmcShardsAreReadAsTheyAre) {
  TempFolder folder;
  const std::vector<uint32_t> train0 = counting_tokens(3, 33, 50257), train1 = counting_tokens(50000, 33, 50257),
                              val0 = counting_tokens(11, 17, 50257);
  write_llmc_shard(folder.path() / "tiny_train_000001.bin", train1);
  write_llmc_shard(folder.path() / "tiny_train_000000.bin", train0);
  write_llmc_shard(folder.path() / "tiny_val_000000.bin", val0);
  const PreparedDataset data = prepare_token_dataset({.train_shards = (folder.path() / "*_train_*.bin").string(),
                                                      .val_shards = (folder.path() / "*_val_*.bin").string(),
                                                      .vocab_size = 50257});
  ASSERT_EQ(data.train_shards.size(), 2u);
  EXPECT_EQ(data.train_shards[0].filename(), "tiny_train_000000.bin") << "shards are taken in name order";
  EXPECT_EQ(data.val_shards, std::vector<fs::path>{folder.path() / "tiny_val_000000.bin"});
  EXPECT_EQ(data.train_tokens, 66);
  EXPECT_EQ(data.val_tokens, 17);
  EXPECT_EQ(data.vocab_size, 50257);
  EXPECT_EQ(data.tokenizer_fingerprint, kNoTokenizerFingerprint);
  EXPECT_TRUE(data.tokenizer_path.empty());

  // The training loader sees exactly the written ids: windows of 33 tokens (T = 32), one per shard, in order.
  std::vector<int32_t> expected(train0.begin(), train0.end());
  expected.insert(expected.end(), train1.begin(), train1.end());
  EXPECT_EQ(loader_stream(data.train_shards, data.vocab_size, 32), expected);
  EXPECT_EQ(loader_stream(data.val_shards, data.vocab_size, 16), std::vector<int32_t>(val0.begin(), val0.end()));
}

TEST(DataPretokenized, LlmcUint32ShardsAreRead) {
  TempFolder folder;
  const std::vector<uint32_t> tokens = counting_tokens(128000, 20, 128256);
  write_llmc_shard(folder.path() / "llama_train.bin", tokens, /*wide=*/true);
  const PreparedDataset data =
      prepare_token_dataset({.train_shards = (folder.path() / "llama_train.bin").string(), .vocab_size = 128256});
  EXPECT_TRUE(data.val_shards.empty());
  const TokenShard shard = TokenShard::open(data.train_shards[0], 128256);
  EXPECT_EQ(shard.read(0, 20), std::vector<int32_t>(tokens.begin(), tokens.end()));
}

TEST(DataPretokenized, AnIdOutsideTheVocabularyNamesTheShard) {
  TempFolder folder;
  write_llmc_shard(folder.path() / "a_train.bin", counting_tokens(0, 40, 1000));
  std::vector<uint32_t> tokens = counting_tokens(0, 40, 1000);
  tokens[17] = 50256;
  write_llmc_shard(folder.path() / "b_train.bin", tokens);
  const std::string message = message_of(
      [&] { prepare_token_dataset({.train_shards = (folder.path() / "*_train.bin").string(), .vocab_size = 1000}); });
  EXPECT_NE(message.find("token shard '" + (folder.path() / "b_train.bin").string() +
                         "' holds token id 50256 at "
                         "position 17"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("set data.vocab_size above the largest id"), std::string::npos) << message;
}

TEST(DataPretokenized, BadSpecsAreErrors) {
  TempFolder folder;
  write_llmc_shard(folder.path() / "x_train.bin", counting_tokens(0, 40, 300));
  std::string message = message_of(
      [&] { prepare_token_dataset({.train_shards = (folder.path() / "nothing_*.bin").string(), .vocab_size = 300}); });
  EXPECT_NE(message.find("data.shards '" + (folder.path() / "nothing_*.bin").string() + "' names no file"),
            std::string::npos)
      << message;
  message = message_of([&] {
    prepare_token_dataset({.train_shards = (folder.path() / "*.bin").string(),
                           .val_shards = (folder.path() / "x_*.bin").string(),
                           .vocab_size = 300});
  });
  EXPECT_NE(message.find("named by both data.shards and data.val_shards"), std::string::npos) << message;
  // A given tokenizer must have exactly the vocabulary's ids.
  const fs::path model = folder.path() / "t.model";
  Tokenizer::train(std::vector<std::string>{"some text to learn a few merges from, some text again\n"},
                   {.vocab_size = 280, .model_path = model});
  message = message_of([&] {
    prepare_token_dataset(
        {.tokenizer = model, .train_shards = (folder.path() / "x_train.bin").string(), .vocab_size = 300});
  });
  EXPECT_NE(message.find("has 280 ids but data.vocab_size is 300: set data.vocab_size=280"), std::string::npos)
      << message;
  const PreparedDataset data = prepare_token_dataset(
      {.tokenizer = model, .train_shards = (folder.path() / "x_train.bin").string(), .vocab_size = 280});
  EXPECT_EQ(data.tokenizer_path, model);
  EXPECT_EQ(data.tokenizer_fingerprint, Tokenizer::load(model).fingerprint());
}

bool python_has_numpy() {
  static const bool ok = std::system(RETORT_PYTHON " -c 'import numpy' > /dev/null 2>&1") == 0;
  return ok;
}

// The writer of llm.c's dev/data/data_common.py, restated with numpy: a header of 256 int32 (magic 20240520,
// version 1, token count) and the tokens as uint16.
constexpr const char* kNumpyWriter = R"(
import sys
import numpy as np
tokens = np.arange(int(sys.argv[2]), dtype=np.int64) * 9973 % 50257
header = np.zeros(256, dtype=np.int32)
header[0] = 20240520
header[1] = 1
header[2] = len(tokens)
with open(sys.argv[1], "wb") as f:
    f.write(header.tobytes())
    f.write(tokens.astype(np.uint16).tobytes())
)";

TEST(DataPretokenized, ShardsFromAnIndependentNumpyWriterAreRead) {
  RETORT_REQUIRE_ORACLE(python_has_numpy(), "numpy is not importable by " RETORT_PYTHON);
  TempFolder folder;
  const fs::path script = folder.path() / "writer.py", shard = folder.path() / "np_train_000000.bin";
  std::ofstream(script) << kNumpyWriter;
  ASSERT_EQ(std::system((std::string(RETORT_PYTHON) + " " + script.string() + " " + shard.string() + " 300").c_str()),
            0);
  const PreparedDataset data = prepare_token_dataset({.train_shards = shard.string(), .vocab_size = 50257});
  EXPECT_EQ(data.train_tokens, 300);
  std::vector<int32_t> expected(300);
  for (int64_t i = 0; i < 300; ++i) expected[i] = static_cast<int32_t>(i * 9973 % 50257);
  EXPECT_EQ(TokenShard::open(shard, 50257).read(0, 300), expected);
  // And retort's own writer gives the same bytes for the same ids.
  write_token_shard(folder.path() / "ours.bin", expected, 50257);
  EXPECT_EQ(testing::read_bytes(folder.path() / "ours.bin"), testing::read_bytes(shard));
}

}  // namespace
}  // namespace retort::data
