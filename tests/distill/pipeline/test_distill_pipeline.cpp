// `retort distill run` as a resumable run: stopped in its teacher and again in its KD student (by an injected NaN)
// and resumed twice, it ends with the same figures, bit for bit, as the pipeline that never stopped; re-running it
// without a flag is refused; a teacher of another shape found in the folder is an error that names the key; in
// online mode no cache is written; --overwrite keeps a user's files; a named teacher is used, never trained.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "distill/pipeline/distill_pipeline.h"
#include "tests/distill/distill_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> pipeline_overrides(const fs::path& run_dir) {
  return testing::pipeline_run_overrides(run_dir);
}

DistillRunReport run_pipeline(std::vector<std::string> overrides, RunStart start,
                              const std::vector<std::string>& more = {}) {
  overrides.insert(overrides.end(), more.begin(), more.end());
  return run_distillation_pipeline(testing::resolve_distill(overrides), Device::cpu(), start);
}

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return {};
}

// The pipeline that never stopped: built once per test process.
const fs::path& straight_pipeline() {
  static const fs::path dir = [] {
    const fs::path run = testing::fresh_dir("pipeline_straight");
    run_pipeline(pipeline_overrides(run), RunStart::kNew);
    return run;
  }();
  return dir;
}

void expect_same_figures(const nlohmann::json& a, const nlohmann::json& b) {
  for (const char* model : {"teacher", "student_kd", "student_labels"})
    for (const char* key : {"loss", "kl_to_teacher", "top1_agreement", "tokens"})
      if (a.at(model).contains(key)) {
        EXPECT_EQ(a.at(model).at(key), b.at(model).at(key)) << model << " " << key;
      }
  EXPECT_EQ(a.at("cache_tokens"), b.at("cache_tokens"));
}

TEST(DistillPipeline, StoppedInTheTeacherAndInAStudentAndResumedGivesTheSameFigures) {
  const fs::path& straight = straight_pipeline();
  const fs::path run = testing::fresh_dir("pipeline_interrupted");
  // Step 6 of the 8-step teacher: it stops after its step-4 checkpoint.
  EXPECT_THROW(run_pipeline(pipeline_overrides(run), RunStart::kNew, {"train.inject_nan_at_step=6"}), Error);
  ASSERT_TRUE(fs::exists(run / "teacher" / "checkpoints" / "step_00000004"));
  EXPECT_FALSE(fs::exists(run / "teacher_topk"));
  // Step 10 of the 12-step KD student: the teacher finishes, the cache is written, the student stops after step 8.
  EXPECT_THROW(run_pipeline(pipeline_overrides(run), RunStart::kResume, {"train.inject_nan_at_step=10"}), Error);
  ASSERT_TRUE(fs::exists(run / "student_kd" / "checkpoints" / "step_00000008"));
  EXPECT_FALSE(fs::exists(run / "student_labels"));
  const DistillRunReport resumed = run_pipeline(pipeline_overrides(run), RunStart::kResume);
  EXPECT_FALSE(resumed.teacher_trained) << "a finished teacher is not trained again";

  const auto a = nlohmann::json::parse(::retort::testing::read_bytes(straight / "results.json"));
  const auto b = nlohmann::json::parse(::retort::testing::read_bytes(run / "results.json"));
  expect_same_figures(a, b);
  // Bits per byte beside nats per token, over the same held-out bytes for all three models.
  for (const char* model : {"teacher", "student_kd", "student_labels"}) {
    const auto& e = b.at(model);
    ASSERT_TRUE(e.contains("bits_per_byte")) << model;
    EXPECT_EQ(e.at("bytes"), b.at("teacher").at("bytes")) << model;
    EXPECT_NEAR(e.at("bits_per_byte").get<double>(),
                e.at("loss").get<double>() * e.at("tokens").get<double>() / std::log(2.0) / e.at("bytes").get<double>(),
                1e-9)
        << model;
  }
  for (const char* student : {"student_kd", "student_labels"}) {
    const auto x = testing::read_metrics(straight / student), y = testing::read_metrics(run / student);
    ASSERT_EQ(x.size(), 12u);
    ASSERT_EQ(y.size(), 12u) << student << ": each step once after the resume";
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i].at("loss"), y[i].at("loss")) << student << " step " << i + 1;
  }
  const auto t1 = testing::read_metrics(straight / "teacher"), t2 = testing::read_metrics(run / "teacher");
  ASSERT_EQ(t2.size(), 8u);
  for (size_t i = 0; i < t1.size(); ++i) EXPECT_EQ(t1[i].at("loss"), t2[i].at("loss")) << "teacher step " << i + 1;

  // Resuming a finished pipeline trains nothing and gives the same table.
  const DistillRunReport again = run_pipeline(pipeline_overrides(run), RunStart::kResume);
  EXPECT_EQ(again.kd.train_seconds, 0.0);
  EXPECT_EQ(again.labels.eval.loss, resumed.labels.eval.loss);
}

TEST(DistillPipeline, ARerunWithoutAFlagIsRefusedAndAnotherTeacherShapeIsAnErrorNamingTheKey) {
  const fs::path& run = straight_pipeline();
  const std::string results = ::retort::testing::read_bytes(run / "results.json");
  const std::string refused = input_error_of([&] { run_pipeline(pipeline_overrides(run), RunStart::kNew); });
  EXPECT_NE(refused.find(run.string()), std::string::npos) << refused;
  EXPECT_NE(refused.find("--resume"), std::string::npos) << refused;
  EXPECT_NE(refused.find("--overwrite"), std::string::npos) << refused;

  const std::string shape =
      input_error_of([&] { run_pipeline(pipeline_overrides(run), RunStart::kResume, {"teacher.n_layer=3"}); });
  EXPECT_NE(shape.find("teacher.n_layer"), std::string::npos) << shape;
  EXPECT_NE(shape.find("teacher.n_layer=2"), std::string::npos) << "the fix: " << shape;
  const std::string data =
      input_error_of([&] { run_pipeline(pipeline_overrides(run), RunStart::kResume, {"data.val_fraction=0.1"}); });
  EXPECT_NE(data.find("data.val_fraction"), std::string::npos) << data;
  EXPECT_EQ(::retort::testing::read_bytes(run / "results.json"), results) << "a refused run changes nothing";
  EXPECT_EQ(testing::read_metrics(run / "teacher").size(), 8u);
}

TEST(DistillPipeline, OnlineModeWritesNoCacheANamedTeacherIsUsedAndOverwriteKeepsAUsersFiles) {
  const fs::path teacher = straight_pipeline() / "teacher";
  const fs::path run = testing::fresh_dir("pipeline_online");
  const std::vector<std::string> online{"distill.mode=online", "distill.teacher=" + teacher.string()};
  const DistillRunReport first = run_pipeline(pipeline_overrides(run), RunStart::kNew, online);
  EXPECT_FALSE(first.teacher_trained);
  EXPECT_FALSE(fs::exists(run / "teacher_topk")) << "online mode writes no cache";
  EXPECT_FALSE(fs::exists(run / "teacher")) << "a named teacher is used where it is";
  EXPECT_TRUE(fs::exists(run / "results.json"));

  std::ofstream(run / "notes.txt") << "mine";
  const DistillRunReport second = run_pipeline(pipeline_overrides(run), RunStart::kOverwrite, online);
  EXPECT_TRUE(fs::exists(run / "notes.txt"));
  EXPECT_TRUE(fs::exists(teacher / "checkpoints")) << "--overwrite never deletes a teacher named outside run.dir";
  EXPECT_EQ(testing::read_metrics(run / "student_kd").size(), 12u);
  EXPECT_EQ(second.kd.eval.loss, first.kd.eval.loss) << "the same run again, from scratch";
}

TEST(DistillPipeline, NeverWritesIntoATrainingRunsFolder) {
  // The straight pipeline's teacher is a plain training run: a `distill run` with run.dir there must not touch it.
  const fs::path teacher = straight_pipeline() / "teacher";
  const std::string config = ::retort::testing::read_bytes(teacher / "config.yaml");
  for (RunStart start : {RunStart::kNew, RunStart::kOverwrite}) {
    const std::string message = input_error_of([&] { run_pipeline(pipeline_overrides(teacher), start); });
    EXPECT_NE(message.find("metrics.jsonl"), std::string::npos) << message;
  }
  EXPECT_EQ(::retort::testing::read_bytes(teacher / "config.yaml"), config);
  EXPECT_FALSE(fs::exists(teacher / "student_kd"));
  EXPECT_EQ(testing::read_metrics(teacher).size(), 8u);
}

TEST(DistillPipeline, ANamedTeacherThatDoesNotExistIsAnError) {
  const fs::path run = testing::fresh_dir("pipeline_no_teacher");
  const std::string message = input_error_of([&] {
    run_pipeline(pipeline_overrides(run), RunStart::kNew, {"distill.teacher=" + (run / "nowhere").string()});
  });
  EXPECT_NE(message.find("distill.teacher"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(run / "student_kd"));
}

}  // namespace
}  // namespace retort::distill
