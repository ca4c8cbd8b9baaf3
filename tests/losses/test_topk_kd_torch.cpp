// PyTorch as an external oracle: the four top-k divergences written with torch ops (log_softmax over the full
// vocabulary, gather at S, a masked logsumexp for the rest bucket, F.cross_entropy for the CE mix) and
// differentiated by autograd; loss and every rank's LOCAL gradient at tp 1 and tp 2, f64 and f32 logits.
// tests/losses/torch_topk_kd.py computes the references in one run; skipped when torch is missing.
#include <gtest/gtest.h>

#include "topk_kd_test_support.h"
#include "torch_oracle.h"

namespace retort::topk_testing {
namespace {

std::vector<Case> torch_cases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto&& tweak) {
    Case c;
    c.name = std::move(name);
    c.vocab_local = 41;
    c.k = 10;
    tweak(c);
    cases.push_back(c);
  };
  add("masked_mean", [](Case&) {});
  add("sum_mass_on_top", [](Case& c) {
    c.options.reduction = Reduction::Sum;
    c.student_top_boost = 12;
  });
  add("teacher_tail_mass_zero", [](Case& c) { c.teacher_full_mass = true; });
  return cases;
}

std::string file_stem(const Case& c, size_t job) {
  return c.name + "_" + std::to_string(job);
}

class TopkDistillationTorch : public loss_testing::TorchOracleSuite<Case> {
 protected:
  static void SetUpTestSuite() {
    if (!open_scratch("topk")) return;
    std::string args;
    for (const Case& c : torch_cases()) {
      const CaseJobs cj = jobs_for(c, 2);
      for (size_t j = 0; j < cj.jobs.size(); ++j) {
        const Job& job = cj.jobs[j];
        const Problem& p = *job.problem;
        const TopkDistillationOptions& o = job.options;
        save_safetensors(input_path(file_stem(c, j)),
                         {{"student", Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64)},
                          {"indices", Tensor::from_ints(p.indices, {p.rows, p.k})},
                          {"logprobs", Tensor::from_doubles(p.logprobs, {p.rows, p.k}, DType::F64)},
                          {"labels", Tensor::from_ints(p.labels, {p.rows})}},
                         {{"temperature", std::to_string(o.temperature)},
                          {"t_squared", o.scale_by_t_squared ? "1" : "0"},
                          {"kd_ratio", std::to_string(o.kd_ratio)},
                          {"forward_weight", std::to_string(o.forward_weight)},
                          {"targets_at_temperature", o.targets_at_temperature ? "1" : "0"},
                          {"ignore_index", std::to_string(o.ignore_index)},
                          {"reduction", o.reduction == Reduction::Sum ? "sum" : "mean"}});
        args += pair_args(file_stem(c, j));
      }
    }
    run_script("torch_topk_kd.py", args);
  }
};

TEST_P(TopkDistillationTorch, LossAndLocalGradientsMatchTorch) {
  const Case& c = GetParam();
  loss_testing::check_split_jobs(c, [&](DType dtype, const std::vector<Job>& jobs, const auto& results) {
    // f32 inputs differ from torch's f64 ones by their rounding: the tolerance covers it (~1e-7 relative).
    const double tol = dtype == DType::F64 ? 1e-12 : 2e-6, grad_tol = dtype == DType::F64 ? 1e-11 : 4e-6;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Job& job = jobs[j];
      const Problem& p = *job.problem;
      const std::string name = divergence_name(job.options.divergence);
      SCOPED_TRACE(job_label(job));
      const SafetensorsFile ref = load_reference(file_stem(c, j));
      // the gradient of one unit of probability, without the denominator: a conservative floor for the mean
      const double unit =
          job.options.kd_ratio * loss_scale_of(job.options) / job.options.temperature + 1 - job.options.kd_ratio;
      loss_testing::expect_ranks_match_torch<ErrorLog>(
          ref, name, results[j], p, unit / p.rows, {tol, grad_tol},
          "topk cpu vs torch " + name + " " + std::string(dtype_name(dtype)));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, TopkDistillationTorch, ::testing::ValuesIn(torch_cases()), case_name);

}  // namespace
}  // namespace retort::topk_testing
