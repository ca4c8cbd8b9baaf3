// PyTorch as an external oracle: the four top-k divergences written with torch ops (log_softmax over the full
// vocabulary, gather at S, a masked logsumexp for the rest bucket, F.cross_entropy for the CE mix) and
// differentiated by autograd; loss and every rank's LOCAL gradient at tp 1 and tp 2, f64 and f32 logits.
// tests/losses/torch_topk_kd.py computes the references in one run; skipped when torch is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/io/safetensors.h"
#include "topk_kd_test_support.h"

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

std::filesystem::path scratch() {
  return std::filesystem::temp_directory_path() / ("retort_topk_torch_" + std::to_string(::getpid()));
}

std::string file_stem(const Case& c, size_t job) {
  return c.name + "_" + std::to_string(job);
}

bool python_has_torch() {
  static const bool ok = std::system(RETORT_PYTHON " -c 'import torch' > /dev/null 2>&1") == 0;
  return ok;
}

class TopkDistillationTorch : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    if (!python_has_torch()) return;
    std::filesystem::create_directories(scratch());
    std::string args;
    for (const Case& c : torch_cases()) {
      const CaseJobs cj = jobs_for(c, 2);
      for (size_t j = 0; j < cj.jobs.size(); ++j) {
        const Job& job = cj.jobs[j];
        const Problem& p = *job.problem;
        const auto in = scratch() / (file_stem(c, j) + ".in.safetensors");
        const auto out = scratch() / (file_stem(c, j) + ".ref.safetensors");
        const TopkDistillationOptions& o = job.options;
        save_safetensors(in,
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
        args += " '" + in.string() + "' '" + out.string() + "'";
      }
    }
    const auto log = scratch() / "torch.log";
    const std::string command = std::string(RETORT_PYTHON " '") + RETORT_SOURCE_DIR +
                                "/tests/losses/torch_topk_kd.py'" + args + " > '" + log.string() + "' 2>&1";
    if (std::system(command.c_str()) != 0) {
      std::ostringstream text;
      text << std::ifstream(log).rdbuf();
      error_ = new std::string(command + "\n" + text.str());
    }
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(scratch(), ignored);
    delete error_;
    error_ = nullptr;
  }
  void SetUp() override {
    if (!python_has_torch()) GTEST_SKIP() << RETORT_PYTHON " cannot import torch (Debian's python3-torch)";
    ASSERT_EQ(error_, nullptr) << *error_;
  }

 private:
  static inline std::string* error_ = nullptr;
};

TEST_P(TopkDistillationTorch, LossAndLocalGradientsMatchTorch) {
  const Case& c = GetParam();
  for (int tp : {1, 2}) {
    // The same global problems (made for tp 2) split over tp ranks.
    CaseJobs cj = jobs_for(c, 2);
    for (auto& [t, p] : cj.problems) p.vocab_local = p.vocab / tp;
    for (DType dtype : {DType::F64, DType::F32}) {
      SCOPED_TRACE("tp " + std::to_string(tp) + " " + std::string(dtype_name(dtype)));
      const auto results = run_tp(c, cj.jobs, tp, dtype, dtype, Device::cpu());
      // f32 inputs differ from torch's f64 ones by their rounding: the tolerance covers it (~1e-7 relative).
      const double tol = dtype == DType::F64 ? 1e-12 : 2e-6, grad_tol = dtype == DType::F64 ? 1e-11 : 4e-6;
      for (size_t j = 0; j < cj.jobs.size(); ++j) {
        const Job& job = cj.jobs[j];
        const Problem& p = *job.problem;
        const std::string name = divergence_name(job.options.divergence);
        SCOPED_TRACE(job_label(job));
        const SafetensorsFile ref = load_safetensors(scratch() / (file_stem(c, j) + ".ref.safetensors"));
        const double torch_loss = ref.get(name + "_loss").to_doubles()[0];
        const std::vector<double> torch_grad = ref.get(name + "_grad").to_doubles();
        ASSERT_TRUE(std::isfinite(torch_loss));
        // the gradient of one unit of probability, without the denominator: a conservative floor for the mean
        const double unit =
            job.options.kd_ratio * loss_scale_of(job.options) / job.options.temperature + 1 - job.options.kd_ratio;
        for (int r = 0; r < tp; ++r) {
          const double le = loss_error(results[j][r].loss, torch_loss);
          const double ge = grad_error(results[j][r].grad, column_slice(torch_grad, p, r), unit / p.rows);
          EXPECT_LE(le, tol) << "rank " << r << ": " << results[j][r].loss << " vs torch " << torch_loss;
          EXPECT_LE(ge, grad_tol) << "rank " << r;
          ErrorLog::get().note("topk cpu vs torch " + name + " " + std::string(dtype_name(dtype)), le, ge);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, TopkDistillationTorch, ::testing::ValuesIn(torch_cases()), case_name);

}  // namespace
}  // namespace retort::topk_testing
