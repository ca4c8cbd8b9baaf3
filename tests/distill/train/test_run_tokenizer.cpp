// A run keeps its tokenizer: RUN/tokenizer.model and its record travel with the run, so eval and generate of an
// earlier run keep working when its data folder is refused to another corpus or even replaced; a resumed run must
// keep its tokenizer; runs on pre-tokenized llm.c shards train and evaluate without one and generate says why not;
// data.val_fraction 0 trains without validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/tokenizer.h"
#include "core/util/error.h"
#include "distill/train/evaluation.h"
#include "distill/train/generate_from_run.h"
#include "distill/train/run_tokenizer.h"
#include "distill/train/trained_model.h"
#include "distill/train/training_loop.h"
#include "tests/distill/train/training_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;
using ::retort::testing::message_of;
using ::retort::testing::read_bytes;
using ::retort::testing::TempFolder;
using ::retort::testing::write_bytes;
using testing::read_metrics;
using testing::resolve;
using testing::tiny_overrides;

constexpr const char* kCorpusA = "/usr/share/games/fortunes/drugs";
constexpr const char* kCorpusB = "/usr/share/games/fortunes/food";

// The tiny run of training_run_support.h, on its own data folder and corpus, 2 steps.
std::vector<std::string> run_overrides(const fs::path& run_dir, const fs::path& data_dir, const std::string& corpus) {
  std::vector<std::string> overrides = tiny_overrides(run_dir);
  overrides.insert(overrides.end(), {"data.dir=" + data_dir.string(), "data.corpus=" + corpus, "data.vocab_size=384",
                                     "train.steps=2", "train.eval_every=0", "train.checkpoint_every=0"});
  return overrides;
}

std::string generated_text(const fs::path& run_dir) {
  GenerationRequest request;
  request.run_dir = run_dir.string();
  request.prompt = "Coffee";
  request.max_new_tokens = 4;
  std::ostringstream out;
  return generate_from_run(request, out).at(0).completion;
}

// The run's validation split, or the given text tokenized with the run's tokenizer.
double validation_loss(const fs::path& run_dir, const std::string& text = "") {
  RunEvaluationRequest request;
  request.run_dir = run_dir;
  request.data = text;
  request.max_batches = 2;
  return evaluate_run(request).report.loss;
}

TEST(RunTokenizer, ARunOnATokenizerJsonKeepsItWithItsConfig) {
  if (!fs::exists(kCorpusA) || !fs::exists(kCorpusB)) GTEST_SKIP() << "Debian's fortunes package is not installed";
  TempFolder folder;
  // A Hugging Face tokenizer.json (GPT-2 style, 384 ids) with the tokenizer_config.json that names its eos token.
  const fs::path model = folder.path() / "hf";
  write_bytes(model / "tokenizer.json",
              read_bytes(fs::path(RETORT_SOURCE_DIR) / "tests/data/hf/tokenizers/tiny_gpt2_style/tokenizer.json"));
  write_bytes(model / "tokenizer_config.json", R"({"eos_token": "<|endoftext|>"})");
  const fs::path data = folder.path() / "data", run = folder.path() / "run";
  std::vector<std::string> overrides = run_overrides(run, data, kCorpusA);
  overrides.push_back("data.tokenizer=" + (model / "tokenizer.json").string());
  run_label_training(resolve(overrides), Device::cpu(), false);
  ASSERT_TRUE(fs::exists(run / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(run / "tokenizer.model"));
  EXPECT_EQ(read_bytes(run / "tokenizer.json"), read_bytes(model / "tokenizer.json"));
  EXPECT_EQ(read_bytes(run / "tokenizer_config.json"), read_bytes(model / "tokenizer_config.json"));
  const auto record = nlohmann::json::parse(read_bytes(run / "run_tokenizer.json"));
  EXPECT_EQ(record.at("file"), "tokenizer.json");
  EXPECT_EQ(record.at("tokenizer_fingerprint"), data::Tokenizer::load(model / "tokenizer.json").fingerprint());
  // The run's copy alone serves generate and eval once the data folder and the source are gone.
  fs::remove_all(data);
  fs::remove_all(model);
  EXPECT_NO_THROW(generated_text(run));
  EXPECT_TRUE(std::isfinite(validation_loss(run, kCorpusB)));
}

TEST(RunTokenizer, AnEarlierRunKeepsItsTokenizerWhenTheCorpusChanges) {
  if (!fs::exists(kCorpusA) || !fs::exists(kCorpusB)) GTEST_SKIP() << "Debian's fortunes package is not installed";
  TempFolder folder;
  const fs::path data = folder.path() / "data", run_a = folder.path() / "run_a";
  run_label_training(resolve(run_overrides(run_a, data, kCorpusA)), Device::cpu(), false);
  // The run holds a copy of the tokenizer its data was made with, and records its fingerprint.
  ASSERT_TRUE(fs::exists(run_a / "tokenizer.model"));
  EXPECT_EQ(read_bytes(run_a / "tokenizer.model"), read_bytes(data / "tokenizer.model"));
  const data::Tokenizer original = data::Tokenizer::load(data / "tokenizer.model");
  const auto record = nlohmann::json::parse(read_bytes(run_a / "run_tokenizer.json"));
  EXPECT_EQ(record.at("tokenizer_fingerprint"), original.fingerprint());
  EXPECT_EQ(record.at("vocab_size"), 384);
  const double loss_before = validation_loss(run_a);
  const double text_loss_before = validation_loss(run_a, kCorpusB);
  const std::string text_before = generated_text(run_a);

  // A run with another seed on the same data rebuilds only the shards (another split): run A is unaffected, and
  // its validation split comes back with its own seed.
  std::vector<std::string> reseeded = run_overrides(folder.path() / "run_seed", data, kCorpusA);
  reseeded.push_back("run.seed=7");
  run_label_training(resolve(reseeded), Device::cpu(), false);
  EXPECT_EQ(read_bytes(data / "tokenizer.model"), read_bytes(run_a / "tokenizer.model"));
  EXPECT_EQ(generated_text(run_a), text_before);
  EXPECT_EQ(validation_loss(run_a), loss_before);

  // A second run on another corpus in the same data folder is refused, naming the folder, both corpora and the fix.
  const std::string refusal = message_of([&] {
    run_label_training(resolve(run_overrides(folder.path() / "run_b", data, kCorpusB)), Device::cpu(), false);
  });
  EXPECT_NE(refusal.find("the data folder '" + data.string() + "' was made from other data"), std::string::npos)
      << refusal;
  EXPECT_NE(
      refusal.find(std::string("made from corpus '") + kCorpusA + "' (1 files), this config gives '" + kCorpusB + "'"),
      std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("set data.dir to a new folder (e.g. data.dir=" + (folder.path() / "food").string() + ")"),
            std::string::npos)
      << refusal;
  // ... and run A evaluates and generates exactly as before.
  EXPECT_EQ(validation_loss(run_a), loss_before);
  EXPECT_EQ(generated_text(run_a), text_before);

  // Even a data folder deleted and rebuilt from another corpus leaves run A its own tokenizer.
  fs::remove_all(data);
  run_label_training(resolve(run_overrides(folder.path() / "run_b", data, kCorpusB)), Device::cpu(), false);
  ASSERT_NE(data::Tokenizer::load(data / "tokenizer.model").fingerprint(), original.fingerprint());
  const TrainedModel model = load_trained_model(run_a, Device::cpu());
  EXPECT_EQ(model.tokenizer_fingerprint, original.fingerprint());
  EXPECT_EQ(load_run_tokenizer(model).fingerprint(), original.fingerprint());
  EXPECT_EQ(generated_text(run_a), text_before);
  EXPECT_EQ(validation_loss(run_a, kCorpusB), text_loss_before) << "eval --data tokenizes with the run's tokenizer";

  // A replaced copy is caught against the record.
  fs::copy_file(data / "tokenizer.model", run_a / "tokenizer.model", fs::copy_options::overwrite_existing);
  const std::string replaced = message_of([&] { load_run_tokenizer(model); });
  EXPECT_NE(replaced.find("is not the tokenizer the run '" + run_a.string() + "' was trained with"), std::string::npos)
      << replaced;
}

TEST(RunTokenizer, AResumedRunMustKeepItsTokenizer) {
  TempFolder folder;
  const fs::path run_dir = folder.path() / "run";
  data::Tokenizer::train(std::vector<std::string>{"one tokenizer's text, one tokenizer's text\n"},
                         {.vocab_size = 280, .model_path = folder.path() / "one.model"});
  data::Tokenizer::train(std::vector<std::string>{"another tokenizer, made from other words entirely\n"},
                         {.vocab_size = 280, .model_path = folder.path() / "two.model"});
  const auto dataset_of = [&](const std::string& name) {
    data::PreparedDataset dataset;
    dataset.tokenizer_path = folder.path() / name;
    dataset.tokenizer_fingerprint = data::Tokenizer::load(dataset.tokenizer_path).fingerprint();
    dataset.vocab_size = 280;
    return dataset;
  };
  keep_run_tokenizer(run_dir, dataset_of("one.model"), /*resume=*/false);
  EXPECT_EQ(read_bytes(run_dir / "tokenizer.model"), read_bytes(folder.path() / "one.model"));
  keep_run_tokenizer(run_dir, dataset_of("one.model"), /*resume=*/true);
  const std::string message = message_of([&] { keep_run_tokenizer(run_dir, dataset_of("two.model"), true); });
  EXPECT_NE(message.find("--resume: the run '" + run_dir.string() + "' was trained with tokenizer " +
                         dataset_of("one.model").tokenizer_fingerprint),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("now gives tokenizer " + dataset_of("two.model").tokenizer_fingerprint), std::string::npos)
      << message;
  EXPECT_EQ(read_bytes(run_dir / "tokenizer.model"), read_bytes(folder.path() / "one.model")) << "kept as it was";
  // A fresh start replaces the copy (the run folder is then a new run).
  keep_run_tokenizer(run_dir, dataset_of("two.model"), false);
  EXPECT_EQ(read_bytes(run_dir / "tokenizer.model"), read_bytes(folder.path() / "two.model"));
  EXPECT_EQ(read_run_tokenizer_record(run_dir)->fingerprint, dataset_of("two.model").tokenizer_fingerprint);
  EXPECT_FALSE(read_run_tokenizer_record(folder.path()).has_value()) << "a folder without a record: an older run";
}

// llm.c's layout, written byte by byte: 256 int32 (magic 20240520, version 1, count), then uint16 tokens.
void write_llmc_shard(const fs::path& path, const std::vector<uint16_t>& tokens) {
  std::string bytes(1024, '\0');
  const int32_t header[3] = {20240520, 1, static_cast<int32_t>(tokens.size())};
  std::memcpy(bytes.data(), header, sizeof(header));
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  write_bytes(path, bytes);
}

// A stream with structure to learn: the sequence 0, 1, ..., 299 over and over.
std::vector<uint16_t> cycling_tokens(size_t count) {
  std::vector<uint16_t> tokens(count);
  for (size_t i = 0; i < count; ++i) tokens[i] = static_cast<uint16_t>(i % 300);
  return tokens;
}

TEST(RunTokenizer, PretokenizedShardsTrainAndEvaluateAndGenerateSaysWhatIsMissing) {
  TempFolder folder;
  write_llmc_shard(folder.path() / "toy_train_000000.bin", cycling_tokens(4000));
  write_llmc_shard(folder.path() / "toy_train_000001.bin", cycling_tokens(3000));
  write_llmc_shard(folder.path() / "toy_val_000000.bin", cycling_tokens(600));
  const fs::path run_dir = folder.path() / "run";
  std::vector<std::string> overrides = tiny_overrides(run_dir);
  overrides.insert(overrides.end(), {"data.corpus=" + std::string(data::kDefaultCorpus),
                                     "data.dir=" + (folder.path() / "unused").string(),
                                     "data.shards=" + (folder.path() / "*_train_*.bin").string(),
                                     "data.val_shards=" + (folder.path() / "*_val_*.bin").string(),
                                     "data.vocab_size=320", "train.steps=4", "optim.lr=1e-2", "optim.min_lr=1e-2"});
  const TrainResult result = run_label_training(resolve(overrides), Device::cpu(), false);
  EXPECT_FALSE(fs::exists(folder.path() / "unused")) << "shards are used where they are";
  const auto metrics = read_metrics(run_dir);
  ASSERT_EQ(metrics.size(), 4u);
  EXPECT_TRUE(metrics[2].contains("eval_loss"));
  EXPECT_LT(metrics[3]["loss"].get<double>(), metrics[0]["loss"].get<double>());
  EXPECT_LT(result.final_eval_loss, std::log(320.0)) << "a learnable cycle ends below the uniform loss";
  // eval scores the run on its validation shards, as the training did.
  EXPECT_NEAR(validation_loss(run_dir), result.final_eval_loss, 1e-9);

  const auto record = nlohmann::json::parse(read_bytes(run_dir / "run_tokenizer.json"));
  EXPECT_EQ(record.at("tokenizer_fingerprint"), data::kNoTokenizerFingerprint);
  EXPECT_TRUE(record.at("file").is_null());
  EXPECT_FALSE(fs::exists(run_dir / "tokenizer.model"));
  const std::string message = message_of([&] { generated_text(run_dir); });
  EXPECT_NE(message.find("was trained on pre-tokenized shards (data.shards) without a tokenizer"), std::string::npos)
      << message;
  EXPECT_NE(message.find("data.tokenizer"), std::string::npos) << message;

  // An id beyond the model's vocabulary names the shard.
  std::vector<uint16_t> bad = cycling_tokens(600);
  bad[599] = 320;
  write_llmc_shard(folder.path() / "toy_val_000000.bin", bad);
  const std::string too_big =
      message_of([&] { run_label_training(resolve(overrides), Device::cpu(), RunStart::kOverwrite); });
  EXPECT_NE(too_big.find("token shard '" + (folder.path() / "toy_val_000000.bin").string() +
                         "' holds token id 320 at position 599"),
            std::string::npos)
      << too_big;
}

TEST(RunTokenizer, ZeroValFractionTrainsWithoutValidation) {
  if (!fs::exists(kCorpusA)) GTEST_SKIP() << "Debian's fortunes package is not installed";
  TempFolder folder;
  const fs::path run_dir = folder.path() / "run";
  std::vector<std::string> overrides = run_overrides(run_dir, folder.path() / "data", kCorpusA);
  overrides.insert(overrides.end(), {"data.val_fraction=0", "train.eval_every=1"});
  const TrainResult result = run_label_training(resolve(overrides), Device::cpu(), false);
  EXPECT_EQ(result.steps, 2);
  EXPECT_TRUE(std::isnan(result.final_eval_loss));
  for (const auto& record : read_metrics(run_dir)) EXPECT_FALSE(record.contains("eval_loss")) << record.dump();
  EXPECT_FALSE(fs::exists(folder.path() / "data" / "val_000.bin"));
}

TEST(RunTokenizer, ConfigChecksOfTheDataKeys) {
  const auto error_of = [](std::vector<std::string> overrides) { return message_of([&] { resolve(overrides); }); };
  EXPECT_NE(error_of({"data.shards=x_*.bin", "data.corpus=my.txt"}).find("data.shards and data.corpus are both set"),
            std::string::npos);
  EXPECT_EQ(resolve({"data.shards=x_*.bin", "data.corpus=''"}).get_string("data.shards"), "x_*.bin");
  EXPECT_NE(error_of({"data.val_shards=x_*.bin"}).find("data.val_shards is set without data.shards"),
            std::string::npos);
  EXPECT_NE(error_of({"data.val_fraction=-0.1"}).find("data.val_fraction"), std::string::npos);
  EXPECT_EQ(resolve({"data.val_fraction=0"}).get_double("data.val_fraction"), 0.0);
}

}  // namespace
}  // namespace retort::distill
