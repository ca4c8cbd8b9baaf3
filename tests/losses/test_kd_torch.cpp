// PyTorch as an external oracle: F.kl_div(log_softmax(x / T), log_softmax(t / T), log_target=True) summed per row
// and averaged over the valid rows, x T^2 (the forward KL), the same with the arguments swapped (the reverse KL),
// and KD losses written with torch ops (forward KL, reverse KL and soft cross-entropy, which also take -inf
// entries), all differentiated by autograd. Loss and gradient, at tp 1 and tp 2, f64 and f32 logits.
// tests/losses/torch_kd.py computes the references in one run; skipped when torch is missing.
#include <gtest/gtest.h>

#include "kd_test_support.h"
#include "torch_oracle.h"

namespace retort::kd_testing {
namespace {

std::vector<Case> torch_cases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto&& tweak) {
    Case c;
    c.name = std::move(name);
    c.vocab_local = 41;
    tweak(c);
    cases.push_back(c);
  };
  add("masked_mean", [](Case&) {});
  add("sum_no_labels", [](Case& c) {
    c.options.reduction = Reduction::Sum;
    c.labels = false;
  });
  add("minus_inf", [](Case& c) {
    c.inf_entries = true;  // in both, or on the side whose zero weight drops the term
    c.inf_teacher_shard = true;
    c.inf_student_shard = true;
  });
  return cases;
}

bool finite_logits(const Case& c) {
  return !c.inf_entries && !c.inf_teacher_shard && !c.inf_student_shard;
}

// The torch references a divergence is compared with (kl_div's log_target form is NaN for a -inf target).
std::vector<std::string> torch_names(const Case& c, Divergence d) {
  switch (d) {
    case Divergence::ForwardKL:
      return finite_logits(c) ? std::vector<std::string>{"kl_div_forward", "kd_ops"}
                              : std::vector<std::string>{"kd_ops"};
    case Divergence::ReverseKL:
      return finite_logits(c) ? std::vector<std::string>{"kl_div_reverse", "reverse_ops"}
                              : std::vector<std::string>{"reverse_ops"};
    case Divergence::SoftCrossEntropy:
      return {"soft_ce_ops"};
  }
  return {};
}

std::string file_stem(const Case& c, const Job& job) {
  return c.name + "_" + divergence_name(job.options.divergence) + "_T" +
         std::to_string(static_cast<int>(job.options.temperature * 10)) + (job.options.scale_by_t_squared ? "_sq" : "");
}

class DistributionLossTorch : public loss_testing::TorchOracleSuite<Case> {
 protected:
  static void SetUpTestSuite() {
    if (!open_scratch("kd")) return;
    std::string args;
    for (const Case& c : torch_cases()) {
      const CaseJobs cj = jobs_for(c, 2);
      for (const Job& job : cj.jobs) {
        const Problem& p = *job.problem;
        save_safetensors(input_path(file_stem(c, job)),
                         {{"student", Tensor::from_doubles(p.student, {p.rows, p.vocab}, DType::F64)},
                          {"teacher", Tensor::from_doubles(p.teacher, {p.rows, p.vocab}, DType::F64)},
                          {"labels", Tensor::from_ints(p.labels, {p.rows})}},
                         {{"temperature", std::to_string(job.options.temperature)},
                          {"t_squared", job.options.scale_by_t_squared ? "1" : "0"},
                          {"ignore_index", std::to_string(c.options.ignore_index)},
                          {"use_labels", c.labels ? "1" : "0"},
                          {"reduction", c.options.reduction == Reduction::Sum ? "sum" : "mean"}});
        args += pair_args(file_stem(c, job));
      }
    }
    run_script("torch_kd.py", args);
  }
};

TEST_P(DistributionLossTorch, LossAndLocalGradientsMatchTorch) {
  const Case& c = GetParam();
  loss_testing::check_split_jobs(c, [&](DType dtype, const std::vector<Job>& jobs, const auto& results) {
    // f32 inputs differ from torch's f64 ones by their rounding: the tolerance covers it (~1e-7 relative).
    const double tol = dtype == DType::F64 ? 1e-12 : 2e-6, grad_tol = dtype == DType::F64 ? 1e-11 : 2e-6;
    for (size_t k = 0; k < jobs.size(); ++k) {
      const Job& job = jobs[k];
      const Problem& p = *job.problem;
      SCOPED_TRACE(job_label(job));
      const SafetensorsFile ref = load_reference(file_stem(c, job));
      const double unit = loss_scale_of(job.options) / job.options.temperature;
      for (const std::string& name : torch_names(c, job.options.divergence)) {
        SCOPED_TRACE(name);
        // the unit without the denominator: a conservative floor for the mean as well
        loss_testing::expect_ranks_match_torch<ErrorLog>(ref, name, results[k], p, unit / p.rows, {tol, grad_tol},
                                                         "cpu vs torch " + name + " " + std::string(dtype_name(dtype)));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, DistributionLossTorch, ::testing::ValuesIn(torch_cases()), case_name);

}  // namespace
}  // namespace retort::kd_testing
