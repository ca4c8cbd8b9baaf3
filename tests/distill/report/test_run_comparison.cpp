// `retort compare` of two or more runs: final and best values, the validation loss at the steps every run
// validated, and the refusal to compare the loss of runs trained on different objectives (allowed by a flag, and
// never needed for keys that mean the same under every objective), against values worked out by hand.
#include <gtest/gtest.h>

#include "distill/report/run_comparison.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;
using retort::testing::message_of;
using retort::testing::read_bytes;
using retort::testing::TempFolder;
using retort::testing::write_bytes;

const char* const kLabels = R"({"name":"labels","label_smoothing":0.0,"z_loss":0.0})";
const char* const kCache =
    R"({"name":"topk_cache","divergence":"forward_kl_rest","k":8,"temperature":1.0,"kd_ratio":0.9})";

fs::path make_run(const fs::path& root, const std::string& name, const std::string& metrics, const char* objective) {
  const fs::path dir = root / name;
  write_bytes(dir / "metrics.jsonl", metrics);
  if (objective) write_bytes(dir / "objective.json", objective);
  return dir;
}

TEST(RunComparison, ThreeRunsGetFinalAndBestValuesAndTheValidationAtCommonSteps) {
  TempFolder root;
  const fs::path a =
      make_run(root.path(), "a",
               "{\"step\":1,\"loss\":4.0,\"ce\":4.1}\n{\"step\":2,\"loss\":3.0,\"ce\":3.2,\"eval_loss\":3.5}\n"
               "{\"step\":3,\"loss\":3.5,\"ce\":3.3}\n{\"step\":4,\"loss\":3.2,\"ce\":3.0,\"eval_loss\":3.1}\n",
               kLabels);
  const fs::path b = make_run(root.path(), "b",
                              "{\"step\":2,\"loss\":2.0,\"ce\":3.0,\"eval_loss\":3.4}\n"
                              "{\"step\":4,\"loss\":1.5,\"ce\":2.9,\"eval_loss\":3.0}\n",
                              kCache);
  const fs::path c = make_run(root.path(), "c",
                              "{\"step\":4,\"loss\":2.5,\"ce\":2.5,\"eval_loss\":2.8,\"eval_top1_agreement\":0.4}\n"
                              "{\"step\":6,\"loss\":2.4,\"ce\":2.6,\"eval_loss\":2.7,\"eval_top1_agreement\":0.5}\n",
                              kLabels);
  RunComparisonRequest request;
  request.runs = {a, b, c};
  request.keys = {"ce"};
  request.names = {"A", "B", "C"};
  request.plot = root.path() / "plot.svg";
  const RunComparison r = compare_runs(request);
  ASSERT_EQ(r.runs.size(), 3u);
  EXPECT_EQ(r.runs[0].final_point, (std::pair<double, double>{4, 3.0}));
  EXPECT_EQ(r.runs[0].best, (std::pair<double, double>{4, 3.0}));
  EXPECT_EQ(r.runs[2].best, (std::pair<double, double>{4, 2.5}));
  EXPECT_EQ(r.runs[2].final_point, (std::pair<double, double>{6, 2.6}));
  EXPECT_EQ(r.common_eval_steps, (std::vector<double>{4}));
  EXPECT_FALSE(r.key.has_value()) << "the step-by-step difference is for two runs";
  EXPECT_NE(r.runs[1].objective.find("topk_cache (divergence forward_kl_rest, k 8"), std::string::npos)
      << r.runs[1].objective;
  const std::string svg = read_bytes(request.plot);
  for (const char* name : {">A<", ">B<", ">C<", ">A, validation<", ">C, validation<"})
    EXPECT_NE(svg.find(name), std::string::npos) << name;

  // More is better for the agreement.
  request.runs = {c, c};
  request.keys = {"eval_top1_agreement"};
  request.names.clear();
  request.plot.clear();
  const RunComparison agreement = compare_runs(request);
  EXPECT_EQ(agreement.runs[0].best, (std::pair<double, double>{6, 0.5}));
  ASSERT_TRUE(agreement.key.has_value());
  EXPECT_EQ(agreement.key->max_relative, 0.0);
}

TEST(RunComparison, TheLossOfDifferentObjectivesIsRefusedUnlessAllowed) {
  TempFolder root;
  const fs::path labels = make_run(root.path(), "labels", "{\"step\":1,\"loss\":4.0,\"ce\":4.0}\n", kLabels);
  const fs::path kd = make_run(root.path(), "kd", "{\"step\":1,\"loss\":1.0,\"ce\":3.9,\"kd\":0.8}\n", kCache);
  RunComparisonRequest request;
  request.runs = {labels, kd};
  const std::string message = message_of([&] { compare_runs(request); });
  for (const char* part : {"labels (label_smoothing 0, z_loss 0)", "topk_cache (divergence forward_kl_rest",
                           "\"loss\" measures different things", "--key ce", "--allow-different-objectives"})
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  // Per run keys: the KD run's loss against the label run's ce is still the KD loss.
  request.keys = {"ce", "loss"};
  EXPECT_NE(message_of([&] { compare_runs(request); }).find("\"loss\" measures"), std::string::npos);
  request.keys = {"ce"};
  const RunComparison ce = compare_runs(request);
  EXPECT_NEAR(ce.key->max_relative, 0.025, 1e-12);
  request.keys = {"loss"};
  request.allow_different_objectives = true;
  EXPECT_NEAR(compare_runs(request).key->max_relative, 0.75, 1e-12);
}

TEST(RunComparison, ARunWithoutObjectiveJsonIsInferredFromItsMetrics) {
  TempFolder root;
  const fs::path old_kd = make_run(root.path(), "old_kd", "{\"step\":1,\"loss\":1.0,\"ce\":3.9,\"kd\":0.8}\n", nullptr);
  const fs::path old_labels = make_run(root.path(), "old_labels", "{\"step\":1,\"loss\":4.0}\n", nullptr);
  EXPECT_EQ(read_run_objective(old_kd).at("name"), "distillation");
  EXPECT_EQ(read_run_objective(old_labels).at("name"), "labels");
  RunComparisonRequest request;
  request.runs = {old_labels, old_kd};
  EXPECT_NE(message_of([&] { compare_runs(request); }).find("inferred"), std::string::npos);
}

TEST(RunComparison, BadRequestsSayWhatToGive) {
  TempFolder root;
  const fs::path a = make_run(root.path(), "a", "{\"step\":1,\"loss\":4.0}\n", kLabels);
  RunComparisonRequest request;
  request.runs = {a};
  EXPECT_NE(message_of([&] { compare_runs(request); }).find("two or more run folders"), std::string::npos);
  request.runs = {a, a, a};
  request.keys = {"loss", "ce"};
  EXPECT_NE(message_of([&] { compare_runs(request); }).find("one key for all of them or one per run"),
            std::string::npos);
  request.keys = {"loss"};
  request.names = {"x"};
  EXPECT_NE(message_of([&] { compare_runs(request); }).find("--names gives 1 name(s) for 3 runs"), std::string::npos);
}

}  // namespace
}  // namespace retort::distill
