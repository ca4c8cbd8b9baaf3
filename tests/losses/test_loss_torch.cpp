// PyTorch as an external oracle for every loss family (torch_oracle.h): loss and every rank's LOCAL gradient at
// tp 1 and tp 2, f64 and f32 logits, against each family's tests/losses/torch_*.py, which computes all of its
// references in one run (the first time a test of the family runs). Skipped when torch is missing (a failure under CI).
#include <gtest/gtest.h>

#include "loss_families.h"
#include "torch_oracle.h"

namespace retort::loss_testing {
namespace {

class LossTorch : public ::testing::TestWithParam<NamedCheck> {
 protected:
  static void SetUpTestSuite() { TorchScratch::open(); }
  static void TearDownTestSuite() { TorchScratch::close(); }
  void SetUp() override {
    RETORT_REQUIRE_ORACLE(python_has_torch_and_numpy(),
                          RETORT_PYTHON " cannot import torch and numpy (Debian's python3-torch, python3-numpy)");
  }
};

TEST_P(LossTorch, LossAndLocalGradientsMatchTorch) {
  GetParam().run();
}

INSTANTIATE_TEST_SUITE_P(Cases, LossTorch,
                         ::testing::ValuesIn(concat<NamedCheck>({torch_checks<CrossEntropyFamily>(),
                                                                 torch_checks<DistributionLossFamily>(),
                                                                 torch_checks<TopkDistillationFamily>()})),
                         param_name<NamedCheck>);

}  // namespace
}  // namespace retort::loss_testing
