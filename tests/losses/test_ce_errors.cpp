// The cross-entropy's bad inputs are InputErrors whose message names the problem: target shapes, ids outside the
// GLOBAL vocabulary, options out of range (logits sharded on another dim: test_loss_groups.cpp, for every family).
#include <gtest/gtest.h>

#include "cross_entropy_family.h"
#include "tests/test_support.h"

namespace retort::loss_testing {
namespace {

using losses::CrossEntropyOptions;
using retort::testing::message_of;

Tensor logits_4x10() {
  return Tensor::zeros({4, 10}, DType::F32);
}

std::string error_of(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& o = {}) {
  return message_of([&] { losses::cross_entropy(logits, targets, o); });
}

TEST(CrossEntropyErrors, TargetShapeMustMatchTheLeadingDims) {
  EXPECT_NE(
      error_of(logits_4x10(), Tensor::from_ints({1, 2, 3}, {3})).find("targets i32[3] on cpu do not match logits"),
      std::string::npos);
  EXPECT_NE(error_of(logits_4x10(), Tensor::zeros({4}, DType::F32)).find("one i32 id per row"), std::string::npos);
  // [4] for [2, 2, 10] logits is fine (flattened rows); [2, 3] is not.
  EXPECT_NO_THROW(losses::cross_entropy(Tensor::zeros({2, 2, 10}), Tensor::from_ints({1, 2, 3, 4}, {4})));
  EXPECT_NE(error_of(Tensor::zeros({2, 2, 10}), Tensor::from_ints({1, 2, 3, 4, 5, 6}, {2, 3})).find("shape [2, 2]"),
            std::string::npos);
}

TEST(CrossEntropyErrors, TargetsOutsideTheVocabularyAreNamed) {
  const std::string high = error_of(logits_4x10(), Tensor::from_ints({1, 2, 10, 3}, {4}));
  EXPECT_NE(high.find("target 10 at row 2 is outside the vocabulary of 10"), std::string::npos) << high;
  const std::string negative = error_of(logits_4x10(), Tensor::from_ints({-5, 2, 1, 3}, {4}));
  EXPECT_NE(negative.find("target -5 at row 0"), std::string::npos) << negative;
  EXPECT_NE(negative.find("ignore_index is -100"), std::string::npos) << negative;
}

// Ids are global: 15 is valid at tp 2 with shards of 10; 20 is not, and every rank says so.
TEST(CrossEntropyErrors, TheVocabularyIsGlobal) {
  run_ranks(
      2,
      [](std::shared_ptr<Communicator> gloo) {
        Tensor logits = logits_4x10();
        logits.set_sharding({1, 1, gloo});
        EXPECT_NO_THROW(losses::cross_entropy(logits, Tensor::from_ints({15, 2, 19, 0}, {4})));
        EXPECT_NE(error_of(logits, Tensor::from_ints({15, 20, 1, 0}, {4}))
                      .find("target 20 at row 1 is outside the "
                            "vocabulary of 20"),
                  std::string::npos);
      },
      test_gloo_options());
}

TEST(CrossEntropyErrors, OptionsOutOfRange) {
  const Tensor targets = Tensor::from_ints({1, 2, 3, 4}, {4});
  CrossEntropyOptions o;
  o.label_smoothing = 1.0;
  EXPECT_NE(error_of(logits_4x10(), targets, o).find("label_smoothing must be in [0, 1)"), std::string::npos);
  o.label_smoothing = -0.1;
  EXPECT_NE(error_of(logits_4x10(), targets, o).find("label_smoothing"), std::string::npos);
  o = {};
  o.normalizer = 0.0;
  EXPECT_NE(error_of(logits_4x10(), targets, o).find("normalizer must be positive"), std::string::npos);
  o = {};
  o.z_loss = -1;
  EXPECT_NE(error_of(logits_4x10(), targets, o).find("z_loss must be >= 0"), std::string::npos);
  o = {};
  o.label_smoothing = 0.1;
  EXPECT_NE(error_of(Tensor::zeros({4, 1}), Tensor::from_ints({0, 0, 0, 0}, {4}), o).find("at least 2"),
            std::string::npos);
  EXPECT_NE(error_of(Tensor::zeros({4, 10}, DType::I32), targets).find("floating dtype"), std::string::npos);
}

}  // namespace
}  // namespace retort::loss_testing
