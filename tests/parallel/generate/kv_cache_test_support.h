#pragma once
// Shared by the KV-cache model tests (CPU, CUDA, NCCL): a small GPT, and a generation script (three prompts of
// different lengths prefilled together right-padded, then decode steps in which one row sits some out) whose
// cached logits are compared, after every call, with the full forward of each active row's whole sequence at
// its last position: the definition of what the cache must reproduce.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/tensor/slicing.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/models/gpt_model.h"
#include "parallel/tp/layers.h"
#include "tests/parallel/generate/padded_prompts.h"

namespace retort::kv_cache_testing {

inline GptConfig small_config() {
  GptConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.init_std = 0.2;  // a visibly non-uniform model, so that wrong positions or keys change the logits
  return c;
}

inline const std::vector<std::vector<int32_t>>& script_prompts() {
  static const std::vector<std::vector<int32_t>> prompts{{3, 9, 27, 17, 51}, {44, 2}, {8, 8, 60, 1, 33, 19, 7}};
  return prompts;
}
constexpr int kScriptSteps = 6;

// Row 1 sits out steps 1 and 3 (a finished sequence keeps its place in the batch).
inline bool script_active(int64_t row, int step) {
  return !(row == 1 && (step == 1 || step == 3));
}
inline int32_t script_token(int64_t row, int step) {
  return static_cast<int32_t>((step * 13 + row * 7 + 5) % 64);
}

// Runs the script on `model` (any tp; its cache in `dtype` on `device`) and compares every active row's local
// logits with the vocabulary slice this rank holds of `dense`'s float64 full forward, within
// tolerance * (1 + |want|). Returns every call's logits, to compare runs with each other.
inline std::vector<std::vector<double>> check_cached_against_full(const GptModel& model, const GptModel& dense,
                                                                  DType dtype, Device device, double tolerance,
                                                                  const std::string& what) {
  const auto& prompts = script_prompts();
  const int64_t B = static_cast<int64_t>(prompts.size()), width = 7;
  const int64_t vocab_local = model.config().vocab_size / tp::group_size(model.tp_group());
  const int64_t first = tp::group_rank(model.tp_group()) * vocab_local;
  std::vector<std::vector<int32_t>> sequences = prompts;
  std::vector<std::vector<double>> all_logits;
  generate::KvCache cache(model, B, model.config().block_size, dtype, device);
  const generate_testing::PaddedPrompts padded = generate_testing::pad_prompts(prompts, width);
  auto compare = [&](const Tensor& logits, const std::vector<int64_t>& rows_valid, const std::string& step) {
    EXPECT_EQ(logits.shape(), Shape({B, vocab_local})) << what << " " << step;
    if (model.tp_group()) {
      EXPECT_EQ(logits.sharding().group.get(), model.tp_group().get()) << what;
    }
    const std::vector<double> got = logits.to_doubles();
    all_logits.push_back(got);
    for (int64_t b = 0; b < B; ++b) {
      if (rows_valid[static_cast<size_t>(b)] == 0) continue;
      const auto& seq = sequences[static_cast<size_t>(b)];
      const int64_t L = static_cast<int64_t>(seq.size());
      NoGradGuard no_grad;
      const Tensor full = dense.forward(Tensor::from_ints(seq, {1, L}), DType::F64);
      const std::vector<double> want = narrow_copy(full.view({L, dense.config().vocab_size}), 0, L - 1, 1).to_doubles();
      for (int64_t v = 0; v < vocab_local; ++v) {
        const double w = want[static_cast<size_t>(first + v)];
        ASSERT_NEAR(got[static_cast<size_t>(b * vocab_local + v)], w, tolerance * (1.0 + std::abs(w)))
            << what << " " << step << " row " << b << " token " << first + v;
      }
    }
  };
  compare(model.forward_cached(Tensor::from_ints(padded.ids, {B, width}, device), padded.lengths, cache, dtype),
          padded.lengths, "prefill");
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({5, 2, 7}));
  for (int step = 0; step < kScriptSteps; ++step) {
    std::vector<int32_t> next;
    std::vector<int64_t> step_valid;
    for (int64_t b = 0; b < B; ++b) {
      next.push_back(script_token(b, step));
      step_valid.push_back(script_active(b, step) ? 1 : 0);
      if (script_active(b, step)) sequences[static_cast<size_t>(b)].push_back(script_token(b, step));
    }
    compare(model.forward_cached(Tensor::from_ints(next, {B, 1}, device), step_valid, cache, dtype), step_valid,
            "decode step " + std::to_string(step));
  }
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({11, 6, 13}));
  return all_logits;
}

}  // namespace retort::kv_cache_testing
