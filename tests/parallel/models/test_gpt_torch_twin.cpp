// GptModel against its PyTorch twin (scripts/torch_twin.py): the same weights and batch through an
// independent float64 torch implementation must give the same logits, loss and every parameter gradient.
// The AdamW trajectory half lives in tests/optim/test_gpt_torch_twin_adamw.cpp, which links the optimizer.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>

#include "core/ops/ops.h"
#include "losses/cross_entropy.h"
#include "tests/parallel/models/torch_twin_harness.h"

namespace retort::twin {
namespace {

TwinCase model_case(std::string name, GptConfig config) {
  TwinCase c;
  c.name = std::move(name);
  c.config = std::move(config);
  return c;
}

// Tied and untied heads, both norms, 2 and 4 heads, with and without biases. GPT-2's init_std of 0.02
// leaves attention nearly uniform and GELU nearly linear, where a wrong scale or the exact erf GELU hide
// under float32 tolerances; the sharp case uses weights ten times larger so they cannot.
std::vector<TwinCase> model_cases() {
  GptConfig sharp = tiny_config(2, false, "layernorm");
  sharp.init_std = 0.2;
  return {
      model_case("TiedLayerNorm2Heads", tiny_config(2, true, "layernorm")),
      model_case("UntiedLayerNorm4Heads", tiny_config(4, false, "layernorm")),
      model_case("TiedRmsNorm4Heads", tiny_config(4, true, "rmsnorm")),
      model_case("UntiedRmsNorm2Heads", tiny_config(2, false, "rmsnorm")),
      model_case("TiedLayerNormNoBias4Heads", tiny_config(4, true, "layernorm", /*bias=*/false)),
      model_case("UntiedLayerNorm2HeadsSharpInit", sharp),
  };
}

class GptTorchTwin : public TwinSuite<GptTorchTwin> {
 public:
  static std::vector<TwinCase> cases() { return model_cases(); }
  static constexpr const char* kScratch = "model";
};

TEST_P(GptTorchTwin, LogitsLossAndGradientsMatchFloat64Torch) {
  const TwinCase& c = GetParam();
  const SafetensorsFile& ref = reference();

  auto model = make_model(c);
  auto [ids, targets] = make_batch(c);
  Tensor logits = model->forward(ids);
  Tensor loss = losses::cross_entropy(logits, targets);
  loss.backward();

  ASSERT_EQ(logits.shape(), ref.get("logits").shape());
  const double logits_err = rel_max_abs_diff(logits.to_doubles(), ref.get("logits").to_doubles());
  EXPECT_LT(logits_err, 1e-5) << "logits: max |diff| / max |torch|";

  const double torch_loss = ref.get("loss").to_doubles().at(0);
  const double loss_err = std::abs(loss.item() - torch_loss) / std::abs(torch_loss);
  EXPECT_LT(loss_err, 1e-5) << "loss " << loss.item() << " vs torch " << torch_loss;

  // Every parameter the model has, and no gradient in the reference the model lacks (a tied head must
  // not surface as a separate lm_head).
  size_t ref_grads = 0;
  for (const auto& [name, t] : ref.tensors) ref_grads += name.starts_with("grad.");
  EXPECT_EQ(ref_grads, model->named_parameters().size());
  const auto [worst_name, worst_err] = worst_param_error(
      *model, ref, "grad.", [](const Tensor& p) { return p.grad(); }, 1e-4);

  std::printf("[torch twin] %-30s logits %.2e  loss %.2e (%.6f)  worst grad %.2e (%s)\n", c.name.c_str(), logits_err,
              loss_err, torch_loss, worst_err, worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Cases, GptTorchTwin, ::testing::ValuesIn(model_cases()), gtest_case_name);

}  // namespace
}  // namespace retort::twin
