#pragma once
// The tiny GPT the tensor-parallel model tests share, and its dense float64 run (CPU) as the reference.
#include <map>
#include <string>

#include "core/ops/ops.h"
#include "parallel/models/gpt_model.h"
#include "tests/parallel/tp/tp_test_support.h"

namespace retort::tp_gpt_testing {

using tp_testing::Mat;

inline GptConfig tiny_config(bool tied, const std::string& norm) {
  GptConfig c;
  c.vocab_size = 64;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 16;
  c.tie_weights = tied;
  c.norm = norm;
  c.init_std = 0.2;  // larger than GPT-2's so that every path carries a visible gradient
  return c;
}

inline Tensor batch_ids() {
  std::vector<int32_t> ids(16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % 64);
  return Tensor::from_ints(ids, {2, 8});
}

// Views a parameter (1-D or 2-D) as a Mat.
inline Mat as_mat(const Tensor& t) {
  Mat m(t.ndim() == 2 ? t.size(0) : 1, t.size(-1));
  m.v = t.to_doubles();
  return m;
}

struct DenseRun {
  Mat logits{0, 0};
  std::map<std::string, Mat> grads;
};

inline DenseRun run_dense(const GptConfig& config, const Mat& r) {
  GptModel model(config);
  model.initialize(7);
  Tensor logits = model.forward(batch_ids(), DType::F64);
  ops::sum(ops::mul(logits, tp_testing::to_tensor(r, DType::F64).view(logits.shape()))).backward();
  DenseRun run;
  run.logits = Mat(16, config.vocab_size);
  run.logits.v = logits.to_doubles();
  for (auto& [name, p] : model.named_parameters()) run.grads.emplace(name, as_mat(p.grad()));
  return run;
}

}  // namespace retort::tp_gpt_testing
