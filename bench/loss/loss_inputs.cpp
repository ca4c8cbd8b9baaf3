#include "bench/loss/loss_inputs.h"

#include <cmath>
#include <random>

#include "core/kernels/kernels.h"
#include "core/tensor/device_runtime.h"
#include "core/tensor/random.h"

namespace retort::bench {
namespace {

// This rank's columns of logits ~ N(0, std^2) [tokens, vocab], the same for any tp: A [tokens, 64] x B [64, vocab]
// on the device (B drawn as B^T so that a rank's columns are rows of it), cheap to draw at any size.
Tensor draw_logits(const LossRun& run, int64_t vocab, int64_t vocab_local, double std, uint64_t seed,
                   const std::string& name) {
  constexpr int64_t k = 64;
  const Tensor a = randn({run.tokens, k}, 1.0, seed, stream_id(name + ".a"), DType::BF16, run.device);
  const Tensor bt =
      randn({vocab, k}, std / std::sqrt(static_cast<double>(k)), seed, stream_id(name + ".b"), DType::BF16, run.device);
  Tensor out = Tensor::empty({run.tokens, vocab_local}, DType::BF16, run.device);
  kernels::gemm(a, bt.rows(run.rank * vocab_local, vocab_local), out, false, true, 1.f, 0.f);
  return out;
}

}  // namespace

LossInputs make_loss_inputs(const LossRun& run, const LossBenchOptions& o, LossKind kind, int64_t vocab) {
  LossInputs in;
  in.vocab = vocab;
  in.vocab_local = vocab / run.tp;
  in.student = draw_logits(run, vocab, in.vocab_local, o.logit_std, o.seed, "student");
  in.student.set_requires_grad(true);
  if (is_kl(kind)) in.teacher = draw_logits(run, vocab, in.vocab_local, o.logit_std, o.seed, "teacher");
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  in.host_targets.resize(static_cast<size_t>(run.tokens));
  for (auto& t : in.host_targets) t = id(rng);
  in.targets = Tensor::from_ints(in.host_targets, {run.tokens}, run.device);
  device_runtime::synchronize(run.device);
  return in;
}

}  // namespace retort::bench
