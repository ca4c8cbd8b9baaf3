// On-policy distillation in the training loop: the step schedule of distill.on_policy_ratio; the config errors,
// each naming its keys; ratio 0 is today's off-policy run bit for bit; ratio 0.5 alternates off- and on-policy
// steps in metrics.jsonl; ratio 1 lowers the student's reverse KL to the teacher on its own continuations of
// held-out prompts; a teacher of another tokenizer is refused; and on a GPU the same run's KL goes down too.
#include <gtest/gtest.h>

#include "core/data/dataset.h"
#include "core/tensor/device.h"
#include "distill/distill_config.h"
#include "distill/distill_training.h"
#include "distill/onpolicy/held_out_divergence.h"
#include "distill/onpolicy/on_policy_options.h"
#include "distill/pipeline/distill_pipeline.h"
#include "distill/train/config_builders.h"
#include "distill/train/trained_model.h"
#include "tests/distill/distill_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::read_metrics;
using testing::resolve_distill;
using testing::student_overrides;
using testing::teacher_with_cache;

TEST(OnPolicySchedule, TheRatioSpreadsOnPolicyStepsEvenly) {
  for (int64_t step = 0; step < 20; ++step) {
    EXPECT_FALSE(is_on_policy_step(step, 0.0));
    EXPECT_TRUE(is_on_policy_step(step, 1.0));
    EXPECT_EQ(is_on_policy_step(step, 0.5), step % 2 == 1) << step;
    EXPECT_EQ(is_on_policy_step(step, 0.25), step % 4 == 3) << step;
  }
  int64_t on = 0;
  for (int64_t step = 0; step < 1000; ++step) on += is_on_policy_step(step, 0.3);
  EXPECT_EQ(on, 300);
}

TEST(OnPolicyConfig, BadKeysAreErrorsNamingThem) {
  const auto error_of = [](std::vector<std::string> keys) {
    auto overrides = testing::small_run_overrides("/tmp/unused");
    overrides.insert(overrides.end(), keys.begin(), keys.end());
    return retort::testing::message_of<std::exception>([&] { resolve_distill(overrides); });
  };
  const auto expect_in = [](const std::string& message, const std::string& fragment) {
    EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << message;
  };
  expect_in(error_of({"distill.on_policy_ratio=1.5"}), "distill.on_policy_ratio");
  expect_in(error_of({"distill.on_policy_divergence=jsd"}), "distill.on_policy_divergence");
  expect_in(error_of({"distill.on_policy_mix=2"}), "distill.on_policy_mix");
  expect_in(error_of({"distill.on_policy_temperature=-1"}), "distill.on_policy_temperature");
  expect_in(error_of({"distill.on_policy_ratio=1", "distill.on_policy_prompt_tokens=8",
                      "distill.on_policy_new_tokens=8", "distill.on_policy_top_p=0"}),
            "distill.on_policy_top_p");
  // The windows are 16 tokens and the context 16 (small_run_overrides).
  const std::string long_prompt =
      error_of({"distill.on_policy_ratio=1", "distill.on_policy_prompt_tokens=17", "distill.on_policy_new_tokens=1"});
  expect_in(long_prompt, "distill.on_policy_prompt_tokens = 17");
  expect_in(long_prompt, "train.seq_len = 16");
  const std::string too_long =
      error_of({"distill.on_policy_ratio=0.5", "distill.on_policy_prompt_tokens=8", "distill.on_policy_new_tokens=9"});
  expect_in(too_long, "distill.on_policy_prompt_tokens + distill.on_policy_new_tokens = 8 + 9");
  expect_in(too_long, "model.block_size = 16");
  const std::string xtoken = error_of({"distill.on_policy_ratio=1", "distill.xtoken.enabled=true"});
  expect_in(xtoken, "distill.on_policy_ratio");
  expect_in(xtoken, "distill.xtoken.enabled");
  const std::string full = error_of({"distill.on_policy_ratio=1", "distill.on_policy_prompt_tokens=16"});
  expect_in(full, "distill.on_policy_prompt_tokens = 16 fills the student's context");
  // Left at 0, the lengths follow the windows: half of the 16-token window for each, at most 32.
  {
    auto overrides = testing::small_run_overrides("/tmp/unused");
    overrides.push_back("distill.on_policy_ratio=1");
    const OnPolicyOptions o = on_policy_options_from(resolve_distill(overrides));
    EXPECT_EQ(o.prompt_tokens, 8);
    EXPECT_EQ(o.new_tokens, 8);
    overrides.insert(overrides.end(), {"model.block_size=256", "train.seq_len=256"});
    const OnPolicyOptions wide = on_policy_options_from(resolve_distill(overrides));
    EXPECT_EQ(wide.prompt_tokens, 32);
    EXPECT_EQ(wide.new_tokens, 32);
    overrides.push_back("distill.on_policy_prompt_tokens=250");
    EXPECT_EQ(on_policy_options_from(resolve_distill(overrides)).new_tokens, 6);
  }
  // Off (ratio 0) the lengths are not checked: today's configs resolve as they did.
  EXPECT_NO_THROW(resolve_distill([] {
    auto o = testing::small_run_overrides("/tmp/unused");
    o.push_back("distill.on_policy_new_tokens=100");
    return o;
  }()));
}

std::vector<std::string> on_policy_student(const fs::path& run_dir, const std::string& ratio) {
  auto overrides = student_overrides(teacher_with_cache(), run_dir);
  overrides.insert(overrides.end(), {"distill.on_policy_ratio=" + ratio, "distill.on_policy_prompt_tokens=8",
                                     "distill.on_policy_new_tokens=8", "train.steps=8"});
  return overrides;
}

TEST(OnPolicyTraining, RatioZeroIsTheOffPolicyRunBitForBit) {
  const fs::path out = fresh_dir("on_policy_zero");
  auto today = student_overrides(teacher_with_cache(), out / "today");
  today.push_back("train.steps=8");
  // Ratio 0 with every other on-policy key changed: none of them may touch the run.
  auto zero = on_policy_student(out / "zero", "0");
  zero.insert(zero.end(), {"distill.on_policy_divergence=forward", "distill.on_policy_temperature=0.5"});
  const TrainResult a = run_distill_training(resolve_distill(today), Device::cpu(), false);
  const TrainResult b = run_distill_training(resolve_distill(zero), Device::cpu(), false);
  ASSERT_EQ(a.train_losses.size(), 8u);
  EXPECT_EQ(a.train_losses, b.train_losses);
  const auto ra = read_metrics(out / "today"), rb = read_metrics(out / "zero");
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    for (const char* key : {"loss", "kd", "ce", "grad_norm"})
      EXPECT_EQ(ra[i].at(key).get<double>(), rb[i].at(key).get<double>()) << "step " << i + 1 << " " << key;
    EXPECT_FALSE(rb[i].contains("batch_kind")) << rb[i].dump();
  }
}

TEST(OnPolicyTraining, RatioOneHalfAlternatesOffAndOnPolicySteps) {
  const fs::path out = fresh_dir("on_policy_half");
  run_distill_training(resolve_distill(on_policy_student(out / "half", "0.5")), Device::cpu(), false);
  const auto records = read_metrics(out / "half");
  ASSERT_EQ(records.size(), 8u);
  for (size_t i = 0; i < records.size(); ++i) {
    const bool on = i % 2 == 1;
    ASSERT_EQ(records[i].at("batch_kind"), on ? "on_policy" : "off_policy") << records[i].dump();
    // An off-policy step reports the labels' cross-entropy of its data batch; an on-policy step the divergence.
    EXPECT_EQ(records[i].contains("on_policy_reverse_kl"), on) << records[i].dump();
    EXPECT_EQ(records[i].contains("ce"), !on) << records[i].dump();
    EXPECT_TRUE(std::isfinite(records[i].at("loss").get<double>()));
  }
  // The last validation also measures the student on its own continuations of held-out prompts.
  EXPECT_GT(records.back().at("eval_on_policy_reverse_kl").get<double>(), 0);
  const nlohmann::json objective = nlohmann::json::parse(retort::testing::read_bytes(out / "half" / "objective.json"));
  EXPECT_EQ(objective.at("name"), "interleaved");
  EXPECT_EQ(objective.at("off_policy").at("name"), "topk_cache");
  EXPECT_EQ(objective.at("on_policy").at("divergence"), "reverse_kl");
}

// Each step's kind and draws follow from the step alone: a run stopped by a NaN and resumed from its checkpoint
// logs the same losses, bit for bit, as the run that was never stopped.
TEST(OnPolicyTraining, AStoppedInterleavedRunResumesBitIdentically) {
  const fs::path out = fresh_dir("on_policy_resume");
  auto keys = [&](const std::string& name) {
    auto overrides = on_policy_student(out / name, "0.5");
    overrides.push_back("train.checkpoint_every=4");
    return overrides;
  };
  run_distill_training(resolve_distill(keys("straight")), Device::cpu(), false);
  auto broken = keys("interrupted");
  broken.push_back("train.inject_nan_at_step=6");
  EXPECT_THROW(run_distill_training(resolve_distill(broken), Device::cpu(), false), Error);
  const TrainResult resumed = run_distill_training(resolve_distill(keys("interrupted")), Device::cpu(), true);
  EXPECT_EQ(resumed.train_losses.size(), 4u) << "resumed from the step-4 checkpoint";
  const auto a = read_metrics(out / "straight"), b = read_metrics(out / "interrupted");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("batch_kind"), b[i].at("batch_kind")) << "step " << i + 1;
    for (const char* key : {"loss", "kd", "grad_norm"})
      EXPECT_EQ(a[i].at(key).get<double>(), b[i].at(key).get<double>()) << "step " << i + 1 << " " << key;
  }
}

// The student's reverse KL to the teacher on its own continuations of held-out prompts, measured the way the
// validations do (held_out_divergence.h, fixed seed), for the student of `config` as initialised and as trained.
struct HeldOut {
  double before = 0, after = 0;
};

HeldOut held_out_reverse_kl(const ResolvedConfig& config, const fs::path& run_dir, Device device) {
  const data::PreparedDataset dataset = data::prepare_token_dataset(dataset_options_from(config));
  std::vector<data::TokenBatch> prompts;
  data::TokenLoader loader(dataset.val_shards, dataset.vocab_size, {8, 16, data::LoaderMode::kEval, 99, 0, 1, 4});
  for (int i = 0; i < 4; ++i) prompts.push_back(loader.next());
  const TrainedModel teacher = load_trained_model(teacher_run_dir(config), device);
  GptModel initial(gpt_config_from(config, dataset.vocab_size));
  initial.initialize(static_cast<uint64_t>(config.get_int("run.seed")));
  initial.to(device);
  const TrainedModel trained = load_trained_model(run_dir, device);
  const OnPolicyOptions options = on_policy_options_from(config);
  HeldOut h;
  h.before = held_out_divergence(initial, DType::F32, *teacher.model, DType::F32, prompts, options).reverse_kl;
  h.after = held_out_divergence(*trained.model, DType::F32, *teacher.model, DType::F32, prompts, options).reverse_kl;
  return h;
}

TEST(OnPolicyTraining, OnPolicyOnlyLowersTheReverseKlOnHeldOutPrompts) {
  const fs::path out = fresh_dir("on_policy_one");
  auto keys = on_policy_student(out / "one", "1");
  keys.push_back("train.steps=30");
  const ResolvedConfig config = resolve_distill(keys);
  const TrainResult result = run_distill_training(config, Device::cpu(), false);
  EXPECT_EQ(result.steps, 30);
  const auto records = read_metrics(out / "one");
  ASSERT_EQ(records.size(), 30u);
  for (const auto& r : records) ASSERT_EQ(r.at("batch_kind"), "on_policy") << r.dump();
  const HeldOut h = held_out_reverse_kl(config, out / "one", Device::cpu());
  EXPECT_LT(h.after, 0.7 * h.before) << "held-out reverse KL " << h.before << " -> " << h.after;
  // The training loss is that divergence on the student's training continuations: it goes down too.
  double early = 0, late = 0;
  for (size_t i = 0; i < 5; ++i) early += records[i].at("on_policy_reverse_kl").get<double>();
  for (size_t i = 25; i < 30; ++i) late += records[i].at("on_policy_reverse_kl").get<double>();
  EXPECT_LT(late, 0.8 * early) << early / 5 << " -> " << late / 5;
}

TEST(OnPolicyTraining, CudaOnPolicyRunLowersTheReverseKl) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const fs::path out = fresh_dir("on_policy_cuda");
  auto keys = on_policy_student(out / "one", "1");
  keys.push_back("train.steps=30");
  const ResolvedConfig config = resolve_distill(keys);
  run_distill_training(config, Device::cuda(0), false);
  const HeldOut h = held_out_reverse_kl(config, out / "one", Device::cuda(0));
  EXPECT_LT(h.after, 0.7 * h.before) << "held-out reverse KL " << h.before << " -> " << h.after;
}

// `retort distill run` with distill.on_policy_ratio=1: the teacher, then an on-policy KD student and the label-only
// one, and no cache (nothing reads it), in a run folder whose results.json records the ratio.
TEST(OnPolicyTraining, APipelineRunOnPolicyOnlyWritesNoCache) {
  const fs::path run = fresh_dir("on_policy_pipeline");
  auto overrides = testing::pipeline_run_overrides(run);
  overrides.insert(overrides.end(), {"distill.on_policy_ratio=1", "distill.on_policy_prompt_tokens=8",
                                     "distill.on_policy_new_tokens=8"});
  const DistillRunReport report = run_distillation_pipeline(resolve_distill(overrides), Device::cpu(), RunStart::kNew);
  EXPECT_TRUE(report.teacher_trained);
  EXPECT_EQ(report.cache_tokens, 0);
  EXPECT_FALSE(fs::exists(run / "teacher_topk")) << "an on-policy-only run writes no cache";
  const auto kd = read_metrics(run / "student_kd");
  ASSERT_EQ(kd.size(), 12u);
  for (const auto& r : kd) EXPECT_EQ(r.at("batch_kind"), "on_policy") << r.dump();
  EXPECT_FALSE(read_metrics(run / "student_labels").back().contains("batch_kind"));
  const nlohmann::json results = nlohmann::json::parse(retort::testing::read_bytes(run / "results.json"));
  EXPECT_EQ(results.at("on_policy_ratio").get<double>(), 1.0);
  EXPECT_EQ(results.at("cache_kind"), "none");
  EXPECT_GT(results.at("student_kd").at("kl_to_teacher").get<double>(), 0);
}

TEST(OnPolicyTraining, ATeacherOfAnotherTokenizerIsRefused) {
  const fs::path root = fresh_dir("on_policy_tokenizer");
  auto teacher = testing::small_run_overrides(root / "teacher");
  teacher.push_back("train.steps=1");
  run_label_training(resolve_distill(teacher), Device::cpu(), false);
  auto student = testing::small_run_overrides(root / "student");
  student.insert(student.end(), {"data.vocab_size=400", "data.dir=" + (root / "data400").string(),
                                 "distill.teacher=" + (root / "teacher").string(), "distill.on_policy_ratio=1",
                                 "distill.on_policy_prompt_tokens=8", "distill.on_policy_new_tokens=8"});
  const std::string message =
      retort::testing::message_of([&] { run_distill_training(resolve_distill(student), Device::cpu(), false); });
  EXPECT_NE(message.find("distill.on_policy_ratio > 0"), std::string::npos) << message;
  EXPECT_NE(message.find("same tokenizer"), std::string::npos) << message;
}

}  // namespace
}  // namespace retort::distill
