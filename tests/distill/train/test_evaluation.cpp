// `retort eval`'s library: bits per byte against the byte size of the scored text decoded by the tokenizer, every
// kind of piece counted (text, byte fallback, end of document); --step picks a checkpoint and a step without one
// lists those there are; a folder near a run (a step folder, the checkpoints folder, a folder of several runs) says
// which folder to pass; --data's shard is kept in a cache outside the run, reused, and remade for other text.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/data/loader.h"
#include "core/data/tokenizer.h"
#include "distill/train/checkpoint_steps.h"
#include "distill/train/eval_data_cache.h"
#include "distill/train/evaluation.h"
#include "distill/train/token_bytes.h"
#include "distill/train/trained_model.h"
#include "distill/train/training_loop.h"
#include "tests/distill/train/training_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;
using retort::testing::message_of;
using retort::testing::write_bytes;

// The tiny run (6 steps, checkpoints at 3 and 6), trained once per test process.
const fs::path& tiny_run() {
  static const fs::path dir = [] {
    const fs::path d = testing::fresh_dir("eval_run");
    run_label_training(testing::resolve(testing::tiny_overrides(d)), Device::cpu(), false);
    return d;
  }();
  return dir;
}

TEST(TokenBytes, EveryKindOfPieceCountsTheBytesItStandsFor) {
  const data::Tokenizer tokenizer = load_run_tokenizer(load_trained_model(tiny_run(), Device::cpu()));
  const std::vector<int32_t> bytes = utf8_bytes_per_token(tokenizer);
  ASSERT_EQ(bytes.size(), 512u);
  EXPECT_EQ(bytes[static_cast<size_t>(tokenizer.eos_id())], 0);
  // Characters the tokenizer never saw encode as byte pieces: 3 UTF-8 bytes for each of these.
  const std::string text = "A computer\n  program: \xE2\x86\x92 \xE6\x97\xA5\xE6\x9C\xAC, tabs\tand spaces.\n";
  const std::vector<int32_t> ids = tokenizer.encode(text);
  int byte_pieces = 0;
  for (int32_t id : ids) byte_pieces += tokenizer.piece(id).starts_with("<0x");
  EXPECT_GE(byte_pieces, 9) << "the three CJK/arrow characters must go through byte fallback";
  EXPECT_EQ(utf8_bytes_of(ids, bytes), static_cast<int64_t>(text.size()));
  std::vector<int32_t> with_eos = ids;
  with_eos.push_back(tokenizer.eos_id());
  with_eos.push_back(-100);  // an ignored target
  EXPECT_EQ(utf8_bytes_of(with_eos, bytes), static_cast<int64_t>(text.size()));
}

TEST(Evaluation, BitsPerByteIsTheLossOverTheDecodedTextsBytes) {
  const TrainedModel model = load_trained_model(tiny_run(), Device::cpu());
  const data::Tokenizer tokenizer = load_run_tokenizer(model);
  const std::vector<int32_t> bytes = utf8_bytes_per_token(tokenizer);
  const std::vector<fs::path> shards = run_validation_shards(tiny_run());
  const EvalReport report = evaluate_model(model, shards, {4, 16, 24}, nullptr, &bytes);
  ASSERT_GT(report.tokens, 0);

  // Independently: the scored targets decoded by the tokenizer, document by document, and their UTF-8 size.
  data::TokenLoader loader(shards, 512, {4, 16, data::LoaderMode::kEval, 0, 0, 1, 24});
  std::vector<int32_t> stream;
  for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
    const data::TokenBatch batch = loader.next();
    stream.insert(stream.end(), batch.targets.begin(), batch.targets.end());
  }
  ASSERT_EQ(static_cast<int64_t>(stream.size()), report.tokens);
  int64_t decoded_bytes = 0, documents = 0;
  std::vector<int32_t> document;
  for (size_t i = 0; i <= stream.size(); ++i) {
    if (i == stream.size() || stream[i] == tokenizer.eos_id()) {
      decoded_bytes += static_cast<int64_t>(tokenizer.decode(document).size());
      documents += i < stream.size();
      document.clear();
    } else {
      document.push_back(stream[i]);
    }
  }
  ASSERT_GT(documents, 1) << "the validation text must hold end-of-document tokens";
  EXPECT_EQ(report.bytes, decoded_bytes);
  ASSERT_TRUE(report.bits_per_byte.has_value());
  const double expected =
      report.loss * static_cast<double>(report.tokens) / std::numbers::ln2 / static_cast<double>(decoded_bytes);
  EXPECT_NEAR(*report.bits_per_byte, expected, 1e-12 * expected);
  EXPECT_GT(*report.bits_per_byte, 0.5);
  EXPECT_LT(*report.bits_per_byte, 8.0 * std::log2(512.0));
}

TEST(EvaluateRun, StepPicksACheckpointAndAStepWithoutOneListsThoseThereAre) {
  EXPECT_EQ(checkpoint_steps(tiny_run()), (std::vector<int64_t>{3, 6}));
  RunEvaluationRequest request;
  request.run_dir = tiny_run();
  request.max_batches = 8;
  const RunEvaluation latest = evaluate_run(request);
  request.step = 3;
  const RunEvaluation third = evaluate_run(request);
  EXPECT_EQ(latest.step, 6);
  EXPECT_EQ(third.step, 3);
  EXPECT_EQ(third.checkpoint.filename(), "step_00000003");
  EXPECT_EQ(third.report.tokens, latest.report.tokens);
  EXPECT_NE(third.report.loss, latest.report.loss);
  ASSERT_TRUE(latest.report.bits_per_byte.has_value());
  const nlohmann::json json = evaluation_json(latest);
  EXPECT_EQ(json.at("step"), 6);
  EXPECT_EQ(json.at("loss").get<double>(), latest.report.loss);
  EXPECT_EQ(json.at("bits_per_byte").get<double>(), *latest.report.bits_per_byte);
  request.step = 4;
  const std::string message = message_of([&] { evaluate_run(request); });
  EXPECT_NE(message.find("--step 4"), std::string::npos) << message;
  EXPECT_NE(message.find("step(s) 3, 6"), std::string::npos) << message;
}

TEST(EvaluateRun, AFolderNearARunSaysWhichFolderToPass) {
  const fs::path run = tiny_run();
  RunEvaluationRequest request;
  request.run_dir = run / "checkpoints" / "step_00000003";
  std::string message = message_of([&] { evaluate_run(request); });
  EXPECT_NE(message.find("one checkpoint of the run " + run.string()), std::string::npos) << message;
  EXPECT_NE(message.find("--checkpoint " + run.string() + " --step 3"), std::string::npos) << message;
  request.run_dir = run / "checkpoints";
  message = message_of([&] { evaluate_run(request); });
  EXPECT_NE(message.find("the checkpoints folder of the run " + run.string()), std::string::npos) << message;
  // A `distill run` folder: its own config.yaml, and the runs inside.
  retort::testing::TempFolder pipeline;
  write_bytes(pipeline.path() / "config.yaml", "run:\n  dir: x\n");
  for (const char* name : {"student_kd", "teacher"}) {
    fs::create_directories(pipeline.path() / name / "checkpoints");
    write_bytes(pipeline.path() / name / "config.yaml", "");
  }
  fs::create_directories(pipeline.path() / "teacher_topk");
  request.run_dir = pipeline.path();
  message = message_of([&] { evaluate_run(request); });
  EXPECT_NE(message.find("holds 2 runs"), std::string::npos) << message;
  EXPECT_NE(message.find((pipeline.path() / "student_kd").string() + ", " + (pipeline.path() / "teacher").string()),
            std::string::npos)
      << message;
  request.run_dir = pipeline.path() / "nowhere";
  EXPECT_NE(message_of([&] { evaluate_run(request); }).find("no such folder"), std::string::npos);
}

TEST(EvaluateRun, DataIsTokenizedOnceIntoACacheOutsideTheRun) {
  retort::testing::TempFolder folder;
  const fs::path text = folder.path() / "held_out.txt";
  std::string paragraphs;
  for (int i = 0; i < 12; ++i)
    paragraphs += "Paragraph " + std::to_string(i) + ": the computer runs a program that reads the manual.\n\n";
  write_bytes(text, paragraphs);
  RunEvaluationRequest request;
  request.run_dir = tiny_run();
  request.data = text.string();
  request.data_cache = folder.path() / "cache";
  const RunEvaluation first = evaluate_run(request);
  ASSERT_EQ(first.shards.size(), 1u);
  EXPECT_EQ(first.shards[0].parent_path().parent_path(), request.data_cache);
  EXPECT_FALSE(fs::exists(tiny_run() / "eval_data"));
  const data::Tokenizer tokenizer = load_run_tokenizer(load_trained_model(tiny_run(), Device::cpu()));
  const EvalDataShard again = eval_data_shard(text.string(), "text", tokenizer, request.data_cache);
  EXPECT_TRUE(again.reused);
  EXPECT_EQ(again.shard, first.shards[0]);
  EXPECT_EQ(evaluate_run(request).report.loss, first.report.loss);
  // Other text (the same path), another folder.
  write_bytes(text, "Different text entirely, so a different hash and another shard of tokens for it.\n");
  const EvalDataShard other = eval_data_shard(text.string(), "text", tokenizer, request.data_cache);
  EXPECT_FALSE(other.reused);
  EXPECT_NE(other.shard, first.shards[0]);
}

}  // namespace
}  // namespace retort::distill
