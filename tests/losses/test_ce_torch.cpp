// PyTorch as an external oracle for the semantics the two share: torch.nn.functional.cross_entropy with
// ignore_index, mean and sum, and label_smoothing under LabelSmoothingConvention::PyTorch (including its +inf
// loss when smoothing mass sits on a -inf logit). Loss and gradient, at tp 1 and tp 2, f64 and f32 logits.
// tests/losses/torch_cross_entropy.py computes the references in one run; skipped when torch is missing.
#include <gtest/gtest.h>

#include "ce_test_support.h"
#include "torch_oracle.h"

namespace retort::ce_testing {
namespace {

std::vector<Case> torch_cases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto&& tweak) {
    Case c;
    c.name = std::move(name);
    c.vocab_local = 41;
    c.options.smoothing_convention = LabelSmoothingConvention::PyTorch;
    tweak(c);
    cases.push_back(c);
  };
  add("ignore_index_mean", [](Case&) {});
  add("custom_ignore_index_sum", [](Case& c) {
    c.options.ignore_index = 3;
    c.options.reduction = Reduction::Sum;
  });
  add("smoothing_mean", [](Case& c) { c.options.label_smoothing = 0.15; });
  add("smoothing_sum_no_mask", [](Case& c) {
    c.options.label_smoothing = 0.3;
    c.options.reduction = Reduction::Sum;
    c.mask_every = 0;
  });
  add("smoothing_minus_inf", [](Case& c) {
    c.options.label_smoothing = 0.1;
    c.neg_inf_entries = true;
  });
  add("minus_inf_shard", [](Case& c) { c.neg_inf_shard = true; });
  return cases;
}

class CrossEntropyTorch : public loss_testing::TorchOracleSuite<Case> {
 protected:
  static void SetUpTestSuite() {
    if (!open_scratch("ce")) return;
    std::string args;
    for (const Case& c : torch_cases()) {
      const Problem p = make_problem(c, 2);
      save_safetensors(input_path(c.name),
                       {{"logits", Tensor::from_doubles(p.logits, {p.rows, p.vocab}, DType::F64)},
                        {"targets", Tensor::from_ints(p.targets, {p.rows})}},
                       {{"ignore_index", std::to_string(c.options.ignore_index)},
                        {"label_smoothing", std::to_string(c.options.label_smoothing)},
                        {"reduction", c.options.reduction == Reduction::Sum ? "sum" : "mean"}});
      args += pair_args(c.name);
    }
    run_script("torch_cross_entropy.py", args);
  }
};

TEST_P(CrossEntropyTorch, LossAndLocalGradientsMatchTorch) {
  const Case& c = GetParam();
  const Problem global = make_problem(c, 2);
  const SafetensorsFile ref = load_reference(c.name);
  const double torch_loss = ref.get("loss").to_doubles()[0];
  const std::vector<double> torch_grad = ref.get("grad").to_doubles();
  if (c.neg_inf_entries && c.options.label_smoothing > 0) {
    EXPECT_EQ(torch_loss, kInf);
  }
  for (int tp : {1, 2}) {
    Problem p = global;
    p.vocab_local = p.vocab / tp;
    for (DType dtype : {DType::F64, DType::F32}) {
      SCOPED_TRACE("tp " + std::to_string(tp) + " " + std::string(dtype_name(dtype)));
      // f32 inputs differ from torch's f64 ones by their rounding: the tolerance covers it (~1e-7 relative).
      const double tol = dtype == DType::F64 ? 1e-12 : 2e-6, grad_tol = dtype == DType::F64 ? 1e-11 : 2e-6;
      const auto results = run_tp(c, p, tp, dtype, Device::cpu());
      for (int r = 0; r < tp; ++r) {
        const double le = loss_error(results[r].loss, torch_loss);
        const double ge = scaled_error(results[r].grad, column_slice(torch_grad, p, r));
        loss_testing::expect_close_to_torch(r, results[r].loss, torch_loss, le, ge, {tol, grad_tol});
        ErrorLog::get().note("cpu vs torch " + std::string(dtype_name(dtype)), le, ge);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossEntropyTorch, ::testing::ValuesIn(torch_cases()), case_name);

}  // namespace
}  // namespace retort::ce_testing
