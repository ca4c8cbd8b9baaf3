#pragma once
// Shared by the decode-step tests (tests/parallel/generate/test_decode_step.cpp, tests/parallel/models/
// test_decode_fused.cpp): three prompts of different lengths prefilled together right-padded, then decode steps of
// one token per row, with every call's logits kept for comparison.
#include <algorithm>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/models/gpt_model.h"
#include "tests/parallel/generate/padded_prompts.h"

namespace retort::decode_testing {

inline const std::vector<std::vector<int32_t>> kPrompts{{3, 9, 27, 17, 51}, {44, 2}, {8, 8, 60, 1, 33, 19, 7}};

// The prefill of `prompts` (kPrompts unless given; at most 7 tokens each) and `steps` decode steps on `model` (on its
// parameters' device): forward_cached, or decode_step when `use_decode_step`. Every call's logits as floats (bf16
// logits are exact in float).
inline std::vector<std::vector<float>> run_script(const GptModel& model, DType dtype, int steps, bool use_decode_step,
                                                  const std::vector<std::vector<int32_t>>& prompts = kPrompts) {
  NoGradGuard no_grad;
  const Device device = model.named_parameters().front().second.device();
  const int64_t B = static_cast<int64_t>(prompts.size()), width = 7;
  generate::KvCache cache(model, B, model.config().block_size, dtype, device);
  const generate_testing::PaddedPrompts padded = generate_testing::pad_prompts(prompts, width);
  std::vector<std::vector<float>> out{
      model.forward_cached(Tensor::from_ints(padded.ids, {B, width}, device), padded.lengths, cache, dtype)
          .to_floats()};
  const Tensor inv_freq = model.rope_frequencies(device);
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> tokens, positions;
    for (int64_t b = 0; b < B; ++b) {
      tokens.push_back(static_cast<int32_t>((step * 13 + b * 7 + 5) % model.config().vocab_size));
      positions.push_back(static_cast<int32_t>(cache.length(b)));
    }
    const std::vector<int64_t> ones(static_cast<size_t>(B), 1);
    if (use_decode_step) {
      out.push_back(model
                        .decode_step(Tensor::from_ints(tokens, {B, 1}, device),
                                     Tensor::from_ints(positions, {B, 1}, device), inv_freq, cache, dtype)
                        .to_floats());
      cache.advance(ones);
    } else {
      out.push_back(model.forward_cached(Tensor::from_ints(tokens, {B, 1}, device), ones, cache, dtype).to_floats());
    }
  }
  return out;
}

}  // namespace retort::decode_testing
