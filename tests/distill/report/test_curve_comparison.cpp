// `retort compare`'s data: metric curves read from metrics.jsonl (the last record of a step counts, records
// without the key are skipped) and the step-by-step relative difference of two curves, against values worked
// out here by hand; bad files and disjoint curves are errors that say what to do.
#include <gtest/gtest.h>

#include "distill/report/curve_comparison.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

using retort::testing::message_of;
using retort::testing::TempFolder;
using retort::testing::write_bytes;

TEST(CurveComparison, ReadsTheKeyByStepAndKeepsTheLastRecordOfAStep) {
  TempFolder dir;
  write_bytes(dir.path() / "metrics.jsonl",
              "{\"step\":1,\"loss\":4.0,\"lr\":0.1}\n"
              "{\"step\":2,\"loss\":3.0}\n"
              "{\"step\":2,\"loss\":2.5,\"eval_loss\":2.75}\n"  // step 2 again (a resumed run): the last counts
              "\n"
              "{\"step\":3,\"lr\":0.05}\n");
  EXPECT_EQ(read_metric_curve(dir.path(), "loss"), (Curve{{1, 4.0}, {2, 2.5}}));
  EXPECT_EQ(read_metric_curve(dir.path(), "eval_loss"), (Curve{{2, 2.75}}));
  EXPECT_EQ(read_metric_curve(dir.path(), "lr"), (Curve{{1, 0.1}, {3, 0.05}}));
  EXPECT_NE(message_of([&] { read_metric_curve(dir.path(), "grad_norm"); }).find("holds no record with \"grad_norm\""),
            std::string::npos);
}

TEST(CurveComparison, RelativeDifferenceOnTheCommonSteps) {
  const Curve a = {{1, 4.0}, {2, 2.0}, {3, 1.0}, {5, 1.0}};
  const Curve b = {{1, 4.0}, {2, 2.1}, {3, 0.99}, {4, 7.0}};  // step 4 and 5 are not in both
  const CurveDifference d = compare_curves(a, b);
  EXPECT_EQ(d.steps, 3);
  EXPECT_NEAR(d.max_relative, 0.05, 1e-15);  // |2.1 - 2| / 2
  EXPECT_EQ(d.worst_step, 2);
  EXPECT_NEAR(d.mean_relative, (0.0 + 0.05 + 0.01) / 3, 1e-15);
  EXPECT_EQ(d.last_a, 1.0);
  EXPECT_EQ(d.last_b, 0.99);
  const CurveDifference same = compare_curves(a, a);
  EXPECT_EQ(same.max_relative, 0.0);
  EXPECT_EQ(same.steps, 4);
}

TEST(CurveComparison, BadInputIsAnErrorThatSaysWhatToDo) {
  TempFolder dir;
  EXPECT_NE(message_of([&] { read_metric_curve(dir.path() / "nowhere", "loss"); }).find("cannot be read"),
            std::string::npos);
  write_bytes(dir.path() / "metrics.jsonl", "{\"step\":1,\"loss\":4.0}\n{\"step\":2,\"loss\":\n");
  EXPECT_NE(message_of([&] { read_metric_curve(dir.path(), "loss"); }).find("line 2 is not JSON"), std::string::npos);
  write_bytes(dir.path() / "metrics.jsonl", "{\"loss\":4.0}\n");
  EXPECT_NE(message_of([&] { read_metric_curve(dir.path(), "loss"); }).find("has no \"step\""), std::string::npos);
  EXPECT_NE(message_of([] { compare_curves({{1, 1.0}}, {{2, 1.0}}); }).find("share no step"), std::string::npos);
}

}  // namespace
}  // namespace retort::distill
