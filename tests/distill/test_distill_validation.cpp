// A distilled student's validations compare it with its teacher (KL(teacher || student) and top-1 agreement in
// metrics.jsonl, checked against float64 math on the reloaded models), a cache student loads the teacher of
// distill.teacher for it, and a label-only student of the same data logs the same "ce" key, so `retort compare`
// compares the two on ce and refuses their different losses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/data/loader.h"
#include "distill/distill_training.h"
#include "distill/report/run_comparison.h"
#include "distill/train/evaluation.h"
#include "distill/train/trained_model.h"
#include "distill/train/training_loop.h"
#include "tests/distill/distill_run_support.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

namespace fs = std::filesystem;
using namespace retort::distill::testing;

TEST(DistillValidation, StudentsLogTheKlToTheTeacherAndLabelStudentsTheSameCe) {
  const fs::path& root = teacher_with_cache();
  const fs::path out = fresh_dir("distill_validation");
  auto kd_keys = student_overrides(root, out / "kd");
  kd_keys.push_back("train.eval_every=12");
  run_distill_training(resolve_distill(kd_keys), Device::cpu(), false);
  auto label_keys = student_overrides(root, out / "labels");
  label_keys.push_back("train.eval_every=12");
  run_label_training(resolve_distill(label_keys), Device::cpu(), false);

  const auto kd = read_metrics(out / "kd"), labels = read_metrics(out / "labels");
  ASSERT_EQ(kd.size(), 24u);
  ASSERT_EQ(labels.size(), 24u);
  for (size_t i : {11u, 23u}) {
    ASSERT_TRUE(kd[i].contains("eval_kl_to_teacher") && kd[i].contains("eval_top1_agreement")) << kd[i].dump();
    EXPECT_FALSE(labels[i].contains("eval_kl_to_teacher")) << "a label-only run has no teacher";
    EXPECT_TRUE(labels[i].contains("eval_loss"));
  }
  EXPECT_FALSE(kd[0].contains("eval_kl_to_teacher")) << "only at validations";
  for (const auto& r : labels) EXPECT_EQ(r.at("ce").get<double>(), r.at("loss").get<double>());

  // The step-24 figures again, in float64 from the reloaded student (its final checkpoint) and teacher, over the
  // validation batches the run used (train.eval_batches = 2 of 8 x 16).
  const TrainedModel student = load_trained_model(out / "kd", Device::cpu());
  const TrainedModel teacher = load_trained_model(root / "teacher", Device::cpu());
  ASSERT_EQ(student.step, 24);
  data::TokenLoader loader(run_validation_shards(out / "kd"), student.vocab_size,
                           {8, 16, data::LoaderMode::kEval, 0, 0, 1, 2});
  double kl = 0, agree = 0, rows = 0;
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    const data::TokenBatch batch = loader.next();
    const Tensor inputs = Tensor::from_ints(batch.inputs, {8, 16});
    const std::vector<float> s = inference_logits(student, inputs).to_floats();
    const std::vector<float> t = inference_logits(teacher, inputs).to_floats();
    const int64_t V = student.vocab_size;
    for (int64_t row = 0; row < 8 * 16; ++row) {
      const float* x = s.data() + row * V;
      const float* y = t.data() + row * V;
      auto lse = [V](const float* z) {
        const double m = *std::max_element(z, z + V);
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - m);
        return m + std::log(sum);
      };
      const double ls = lse(x), lt = lse(y);
      for (int64_t v = 0; v < V; ++v) {
        const double log_p = y[v] - lt, log_q = x[v] - ls;
        kl += std::exp(log_p) * (log_p - log_q);
      }
      agree += (std::max_element(x, x + V) - x) == (std::max_element(y, y + V) - y);
      ++rows;
    }
  }
  EXPECT_EQ(rows, 2 * 8 * 16);
  EXPECT_NEAR(kd[23].at("eval_kl_to_teacher").get<double>(), kl / rows, 1e-4 * kl / rows);
  EXPECT_DOUBLE_EQ(kd[23].at("eval_top1_agreement").get<double>(), agree / rows);

  // Compared on ce (the same quantity for both), not on their losses.
  RunComparisonRequest request;
  request.runs = {out / "labels", out / "kd"};
  request.keys = {"ce"};
  const RunComparison on_ce = compare_runs(request);
  EXPECT_EQ(on_ce.runs[1].final_point.second, kd[23].at("ce").get<double>());
  EXPECT_NE(on_ce.runs[1].objective.find("topk_cache"), std::string::npos);
  request.keys = {"loss"};
  EXPECT_NE(retort::testing::message_of([&] { compare_runs(request); }).find("--allow-different-objectives"),
            std::string::npos);
}

}  // namespace
}  // namespace retort::distill
