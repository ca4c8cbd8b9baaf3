// End-to-end tests of `retort train` on a tiny model: exact resume, NaN handling, config errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/util/error.h"
#include "distill/train/checkpoint.h"
#include "distill/train/config_builders.h"
#include "distill/train/training_loop.h"
#include "tests/distill/train/training_run_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

using testing::fresh_dir;
using testing::read_metrics;
using testing::resolve;
using testing::tiny_overrides;

TEST(Trainer, ResumeAfterInterruptionIsBitIdentical) {
  const fs::path straight = fresh_dir("straight"), interrupted = fresh_dir("interrupted");
  TrainResult full = run_label_training(resolve(tiny_overrides(straight)), Device::cpu(), false);
  ASSERT_EQ(full.steps, 6);

  // Interrupt at step 4 (a NaN loss): the run stops with an error and keeps the step-3 checkpoint.
  auto overrides = tiny_overrides(interrupted);
  overrides.push_back("train.inject_nan_at_step=3");
  try {
    run_label_training(resolve(overrides), Device::cpu(), false);
    FAIL() << "a NaN loss must stop training";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("loss is nan at step 4"), std::string::npos) << message;
    EXPECT_NE(message.find("step_00000003"), std::string::npos) << message;
  }
  auto latest = latest_checkpoint(interrupted);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->filename(), "step_00000003");

  TrainResult resumed = run_label_training(resolve(tiny_overrides(interrupted)), Device::cpu(), true);
  EXPECT_EQ(resumed.steps, 6);
  ASSERT_EQ(resumed.train_losses.size(), 3u);

  const auto a = read_metrics(straight), b = read_metrics(interrupted);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u) << "metrics.jsonl must hold each step once after a resume";
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    // Bit-identical: compare the doubles exactly.
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i]["lr"].get<double>(), b[i]["lr"].get<double>()) << "step " << i + 1;
  }
  EXPECT_EQ(a[5]["eval_loss"].get<double>(), b[5]["eval_loss"].get<double>());
  EXPECT_EQ(full.final_eval_loss, resumed.final_eval_loss);
}

// An infinite loss (either sign) poisons the step's gradients like a NaN: the run stops the same way, before the
// optimizer step, and keeps the last checkpoint to resume from.
TEST(Trainer, AnInfiniteLossStopsTheRunLikeNaN) {
  for (const std::string value : {"inf", "-inf"}) {
    const fs::path dir = fresh_dir("infinite" + value);
    auto overrides = tiny_overrides(dir);
    overrides.insert(overrides.end(), {"train.inject_nan_at_step=3", "train.inject_loss_value=" + value});
    try {
      run_label_training(resolve(overrides), Device::cpu(), false);
      FAIL() << "an infinite loss (" << value << ") must stop training";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("loss is " + value + " at step 4"), std::string::npos) << message;
      EXPECT_NE(message.find("step_00000003"), std::string::npos) << message;
    }
    EXPECT_EQ(read_metrics(dir).size(), 3u) << "the bad step must not be logged";
    const auto latest = latest_checkpoint(dir);
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(latest->filename(), "step_00000003");
  }
}

TEST(Trainer, LossGoesDownAndMetricsHaveTheFields) {
  const fs::path dir = fresh_dir("descent");
  auto overrides = tiny_overrides(dir);
  overrides.push_back("train.steps=30");
  overrides.push_back("train.eval_every=30");
  overrides.push_back("optim.lr=3e-3");
  TrainResult r = run_label_training(resolve(overrides), Device::cpu(), false);
  ASSERT_EQ(r.train_losses.size(), 30u);
  EXPECT_NEAR(r.train_losses.front(), std::log(512.0), 0.3) << "an initialised model predicts nearly uniformly";
  EXPECT_LT(r.train_losses.back(), r.train_losses.front() - 0.5);
  const auto records = read_metrics(dir);
  for (const char* key : {"step", "loss", "lr", "tokens_per_s", "grad_norm"})
    EXPECT_TRUE(records[0].contains(key)) << key;
  EXPECT_TRUE(records.back().contains("eval_loss"));
  EXPECT_TRUE(fs::exists(dir / "config.yaml"));
}

TEST(Trainer, LossOptionsFromTheConfigReachTheLoss) {
  // At initialisation the logits are near zero, so lse ~ log V and a z-loss of w adds ~ w log(V)^2 to the first
  // step's loss; label smoothing leaves a near-uniform prediction's loss near log V.
  auto run_first_step = [](const std::string& name, std::vector<std::string> extra) {
    auto overrides = tiny_overrides(fresh_dir(name));
    overrides.push_back("train.steps=1");
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return run_label_training(resolve(overrides), Device::cpu(), false).train_losses.at(0);
  };
  const double plain = run_first_step("loss_plain", {});
  const double z = run_first_step("loss_z", {"loss.z_loss=0.01"});
  const double smoothed = run_first_step("loss_smooth", {"loss.label_smoothing=0.1"});
  EXPECT_NEAR(z - plain, 0.01 * std::log(512.0) * std::log(512.0), 0.02);
  EXPECT_NE(smoothed, plain);
  EXPECT_NEAR(smoothed, plain, 0.05);
}

TEST(Trainer, CudaRunFollowsTheCpuRun) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const fs::path cpu_dir = fresh_dir("cpu_twin"), gpu_dir = fresh_dir("gpu_twin");
  TrainResult cpu = run_label_training(resolve(tiny_overrides(cpu_dir)), Device::cpu(), false);
  TrainResult gpu = run_label_training(resolve(tiny_overrides(gpu_dir)), Device::cuda(0), false);
  ASSERT_EQ(cpu.train_losses.size(), gpu.train_losses.size());
  for (size_t i = 0; i < cpu.train_losses.size(); ++i)
    EXPECT_NEAR(gpu.train_losses[i], cpu.train_losses[i], 1e-4 * cpu.train_losses[i]) << "step " << i + 1;
  EXPECT_NEAR(gpu.final_eval_loss, cpu.final_eval_loss, 1e-4 * cpu.final_eval_loss);
}

TEST(TrainerConfig, UnknownKeysAndBadValuesNameTheKey) {
  auto expect_input_error = [](std::vector<std::string> overrides, const std::string& needle) {
    try {
      resolve(overrides);
      FAIL() << "expected an error mentioning " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_input_error({"model.n_layers=3"}, "model.n_layer");  // suggestion for the misspelt key
  expect_input_error({"model.n_layer=abc"}, "model.n_layer");
  expect_input_error({"optim.lr=-1"}, "optim.lr");
  expect_input_error({"model.norm=batchnorm"}, "model.norm");
  expect_input_error({"model.n_embd=100", "model.n_head=3"}, "model.n_embd");
  expect_input_error({"train.seq_len=256"}, "train.seq_len");
  expect_input_error({"data.tokenizer_type=wordpiece"}, "data.tokenizer_type");
  expect_input_error({"data.tokenizer_type=wordpiece"}, "bpe, unigram");
}

TEST(TrainerConfig, TokenizerTypeReachesTheDatasetOptions) {
  EXPECT_EQ(dataset_options_from(resolve({})).tokenizer_type, data::TokenizerModelType::kBpe);
  EXPECT_EQ(dataset_options_from(resolve({"data.tokenizer_type=unigram"})).tokenizer_type,
            data::TokenizerModelType::kUnigram);
}

TEST(TrainerConfig, ShippedConfigResolves) {
  Config config = Config::load(fs::path(RETORT_SOURCE_DIR) / "configs" / "toy-gpt.yaml");
  const ResolvedConfig resolved = config.resolve(training_schema());
  EXPECT_EQ(resolved.get_int("data.vocab_size"), 8192);
}

}  // namespace
}  // namespace retort::distill
