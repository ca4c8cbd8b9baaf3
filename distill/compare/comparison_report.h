#pragma once
// The outputs of `retort distill compare`: compare.json (every figure of every method, as in its method.json, and
// the teacher's), compare.md (the Markdown table the command prints) and compare_curves.svg (every method's
// held-out loss over the steps, on one plot).
#include <filesystem>
#include <string>
#include <vector>

#include "distill/compare/method_result.h"
#include "distill/train/evaluation.h"

namespace retort::distill {

struct ComparisonReport {
  std::filesystem::path run_dir, teacher_dir;
  bool teacher_trained = false;  // false: an existing or finished teacher was used
  double teacher_seconds = 0;
  EvalReport teacher;
  int64_t student_steps = 0;  // train.steps of every student
  std::vector<MethodResult> methods;
  double total_seconds = 0;
};

nlohmann::json comparison_json(const ComparisonReport& report);
std::string comparison_markdown(const ComparisonReport& report);
// Writes compare.json, compare.md and compare_curves.svg into report.run_dir.
void write_comparison_outputs(const ComparisonReport& report);

}  // namespace retort::distill
