// The pieces of the static decode step on the CPU: GptModel::inference_copy (weights cast once) computes exactly
// the logits of the model it copies in bf16, bit for bit, casting only what the forward casts anyway; and
// GptModel::decode_step (positions read from a tensor, no host work) computes exactly forward_cached's logits for
// one new token per row. gpt (tied and untied head; tp 2 for the copy) and the Llama family (qwen3: grouped-query
// heads, rotary positions, per-head q/k norms in float32).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/util/error.h"
#include "parallel/generate/generator.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/models/gpt_model.h"
#include "tests/parallel/comm/test_comm_support.h"
#include "tests/parallel/generate/decode_script_test_support.h"

namespace retort {
namespace {

using decode_testing::kPrompts;
using decode_testing::run_script;

GptConfig gpt_config(bool tied) {
  GptConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.tie_weights = tied;
  c.init_std = 0.2;
  return c;
}

GptConfig qwen3_config() {
  GptConfig c = gpt_config(false);
  c.family = "qwen3";
  c.norm = "rmsnorm";
  c.bias = false;
  c.n_kv_head = 2;
  c.qk_norm = true;
  return c;
}

struct Case {
  std::string name;
  GptConfig config;
};

std::vector<Case> cases() {
  return {{"gpt tied", gpt_config(true)}, {"gpt untied", gpt_config(false)}, {"qwen3", qwen3_config()}};
}

TEST(InferenceCopy, Bf16LogitsEqualTheModelsBitForBit) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    GptModel model(c.config);
    model.initialize(7);
    const std::shared_ptr<GptModel> copy = model.inference_copy(DType::BF16);
    ASSERT_NE(copy, nullptr);
    const auto want = run_script(model, DType::BF16, 4, false);
    const auto got = run_script(*copy, DType::BF16, 4, false);
    ASSERT_EQ(got.size(), want.size());
    for (size_t call = 0; call < want.size(); ++call) EXPECT_EQ(got[call], want[call]) << "call " << call;
  }
}

// Under tensor parallelism (Gloo thread ranks, tp 2, a vocabulary of 63 padded to 64, tied head): every rank's
// copy computes its shard's logits exactly as the rank's model does.
TEST(InferenceCopy, EveryTpRankComputesItsShardBitForBit) {
  comm_testing::on_ranks(2, [&](std::shared_ptr<Communicator> group) {
    GptConfig config = gpt_config(true);
    config.vocab_size = 63;
    GptModel model(config, group);
    model.initialize(7);
    const std::shared_ptr<GptModel> copy = model.inference_copy(DType::BF16);
    const auto want = run_script(model, DType::BF16, 3, false);
    const auto got = run_script(*copy, DType::BF16, 3, false);
    ASSERT_EQ(got.size(), want.size());
    for (size_t call = 0; call < want.size(); ++call)
      EXPECT_EQ(got[call], want[call]) << "rank " << group->rank() << ", call " << call;
  });
}

TEST(InferenceCopy, CastsWhatTheForwardCastsAndSharesTheRest) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    GptModel model(c.config);
    model.initialize(7);
    const std::shared_ptr<GptModel> copy = model.inference_copy(DType::BF16);
    const bool llama = c.config.llama_family();
    const std::string table = llama ? "model.embed_tokens.weight" : "wte.weight";
    Tensor original_table;
    for (const auto& [name, t] : model.named_parameters())
      if (name == table) original_table = t;
    for (const auto& [name, t] : copy->named_parameters()) {
      SCOPED_TRACE(name);
      const bool embedding = name == table || name == "wpe.weight";
      const bool f32_norm =
          llama && (name.find("layernorm") != std::string::npos || name.find("q_norm") != std::string::npos ||
                    name.find("k_norm") != std::string::npos);
      EXPECT_EQ(t.dtype(), embedding || f32_norm ? DType::F32 : DType::BF16);
      EXPECT_FALSE(t.requires_grad());
      if (name == table) {
        EXPECT_EQ(t.raw_data(), original_table.raw_data()) << "the lookup table is shared";
      }
    }
    // A tied head becomes the bf16 rows of the token table.
    if (c.config.tie_weights) {
      Tensor head;
      for (const auto& [name, t] : copy->named_parameters())
        if (name == "lm_head.weight") head = t;
      ASSERT_TRUE(head.defined());
      EXPECT_EQ(head.to_floats(), original_table.to(DType::BF16).to_floats());
    }
  }
}

TEST(InferenceCopy, F32NeedsNoCopy) {
  GptModel model(gpt_config(true));
  EXPECT_EQ(model.inference_copy(DType::F32), nullptr);
}

// generate_tokens with a copy made once by the caller (GenerationOptions::inference_model, reused over batches)
// gives the tokens it gives when it makes its own; a copy of another model's shape is an InputError.
TEST(InferenceCopy, APreparedCopyGivesTheSameTokens) {
  GptModel model(gpt_config(true));
  model.initialize(7);
  generate::GenerationOptions options;
  options.max_new_tokens = 5;
  options.compute_dtype = DType::BF16;
  options.sampling.temperature = 0.8;
  options.sampling.seed = 9;
  const auto own = generate::generate_tokens(model, kPrompts, options);
  options.inference_model = model.inference_copy(DType::BF16);
  const auto prepared = generate::generate_tokens(model, kPrompts, options);
  ASSERT_EQ(own.size(), prepared.size());
  for (size_t i = 0; i < own.size(); ++i) EXPECT_EQ(own[i].tokens, prepared[i].tokens) << i;
  GptConfig deeper = gpt_config(true);
  deeper.n_layer = 3;
  options.inference_model = GptModel(deeper).inference_copy(DType::BF16);
  EXPECT_THROW(generate::generate_tokens(model, kPrompts, options), InputError);
}

TEST(DecodeStep, EqualsForwardCachedBitForBit) {
  for (const Case& c : cases()) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dtype)));
      GptModel model(c.config);
      model.initialize(7);
      const auto want = run_script(model, dtype, 5, false);
      const auto got = run_script(model, dtype, 5, true);
      ASSERT_EQ(got.size(), want.size());
      for (size_t call = 0; call < want.size(); ++call) EXPECT_EQ(got[call], want[call]) << "call " << call;
    }
  }
}

TEST(DecodeStep, BadInputsAreErrors) {
  GptModel model(gpt_config(false));
  model.initialize(7);
  generate::KvCache cache(model, 2, 8, DType::F32, Device::cpu());
  const Tensor no_freq;
  EXPECT_THROW(model.decode_step(Tensor::from_ints({1, 2, 3}, {3, 1}), Tensor::from_ints({0, 0, 0}, {3, 1}), no_freq,
                                 cache, DType::F32),
               Error);
  EXPECT_THROW(model.decode_step(Tensor::from_ints({1, 2}, {2, 1}), Tensor::from_ints({0, 0, 0, 0}, {2, 2}), no_freq,
                                 cache, DType::F32),
               Error);
  GptModel llama(qwen3_config());
  generate::KvCache llama_cache(llama, 2, 8, DType::F32, Device::cpu());
  EXPECT_THROW(llama.decode_step(Tensor::from_ints({1, 2}, {2, 1}), Tensor::from_ints({0, 0}, {2, 1}), no_freq,
                                 llama_cache, DType::F32),
               Error);
}

}  // namespace
}  // namespace retort
