// The graphed training step (distill/train/graphed_train_step.h) against the eager loop it replaces: the same tiny
// GPT from the same seed trained for a few steps both ways, with gradient accumulation and a clip that applies,
// must report the same losses and gradient norms and end with the same weights. Two losses: the labels'
// cross-entropy, and the top-k cache's distillation (a cache written here, with rows past its end, kd_ratio 0.7),
// whose "ce" and "kd" metrics must also be the eager objective's. On the CPU the graphed step runs its work eagerly
// (so the arithmetic of its update, its norm, its accumulation and its staged targets is checked in CI); on a GPU
// (skipped without one) its third step records the graphs and the rest replay them, in f32 and in bf16. Also: a bad
// target id, label or teacher id is refused on the host before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <random>

#include "core/ops/ops.h"
#include "distill/cache/cache_targets.h"
#include "distill/cache/topk_cache.h"
#include "distill/objectives/cache_graphed_loss.h"
#include "distill/train/graphed_train_step.h"
#include "distill/train/plain_cross_entropy.h"
#include "losses/cross_entropy.h"
#include "losses/topk_distillation.h"
#include "optim/grad_clip.h"
#include "tests/test_support.h"

namespace retort::distill {
namespace {

GptConfig tiny_config() {
  GptConfig c;
  c.vocab_size = 97;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

constexpr int64_t kVocab = 97, kCacheTokens = 100, kTopK = 5;

// Windows of the token stream the cache covers: row b starts at (seed * 7 + b * 23) % 90, so some windows run past
// the cache's 100 tokens (masked rows).
data::TokenBatch random_batch(int64_t batch, int64_t seq, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  data::TokenBatch b;
  b.batch = batch;
  b.seq = seq;
  for (int64_t i = 0; i < batch * seq; ++i) {
    b.inputs.push_back(token(rng));
    b.targets.push_back(token(rng));
  }
  b.targets[3] = -100;  // an ignored position
  for (int64_t r = 0; r < batch; ++r) b.window_starts.push_back((seed * 7 + r * 23) % 90);
  return b;
}

// A top-k cache of kCacheTokens positions: per position kTopK distinct ids and their log-probabilities.
struct TeacherCache {
  testing::TempFolder folder;
  std::optional<TopKCacheReader> reader;
  losses::TopkDistillationOptions options;

  TeacherCache() {
    TopKCacheSpec spec;
    spec.k = kTopK;
    spec.vocab = kVocab;
    spec.value_type = CacheValueType::F32;
    spec.tokenizer_id = "test-tokenizer";
    spec.dataset = {kCacheTokens, 0x5eedull};
    spec.cache_tokens = kCacheTokens;
    spec.shard_tokens = 32;
    std::mt19937 rng(77);
    std::vector<int32_t> ids, all(kVocab);
    std::vector<float> logprobs, lse(kCacheTokens, 0.f);
    for (int64_t t = 0; t < kCacheTokens; ++t) {
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      double mass = 0;
      for (int64_t j = 0; j < kTopK; ++j) mass += 1.0 / static_cast<double>(j + 2);
      for (int64_t j = 0; j < kTopK; ++j) {
        ids.push_back(all[static_cast<size_t>(j)]);
        logprobs.push_back(static_cast<float>(std::log(0.9 / (static_cast<double>(j + 2) * mass))));
      }
    }
    TopKCacheWriter writer(folder.path(), spec);
    writer.append(0, kCacheTokens, ids, logprobs, lse);
    reader.emplace(TopKCacheReader::open(folder.path()));
    options.kd_ratio = 0.7;
  }
};

struct Trace {
  std::vector<double> losses, norms;
  std::vector<std::vector<float>> weights;
  std::vector<double> ce, kd;  // the cache's metrics, per micro-batch
};

void expect_throw_containing(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

constexpr int64_t kBatch = 2, kSeq = 16, kAccum = 2, kSteps = 6;
constexpr double kClip = 0.05;  // below the norms of these steps: clipping applies

double lr_at(int64_t step) {
  return 3e-3 / static_cast<double>(step + 1);
}

// Trains with the labels' cross-entropy, or with the cache's distillation loss when `cache` is given.
Trace train(Device device, DType dtype, bool graphed_step, bool* graphed_at_end = nullptr,
            const TeacherCache* cache = nullptr) {
  GptModel model(tiny_config());
  model.initialize(3);
  model.to(device);
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), 0.1), {});
  Trace trace;
  std::unique_ptr<GraphedTrainStep> step_runner;
  if (graphed_step) {
    GraphedStepOptions options;
    options.batch = kBatch;
    options.seq = kSeq;
    options.grad_accum = kAccum;
    options.max_norm = kClip;
    options.compute_dtype = dtype;
    if (cache) options.loss = graphable_cache_loss(*cache->reader, cache->options);
    step_runner = std::make_unique<GraphedTrainStep>(model, optimizer, options, device);
  }
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int64_t micro = 0; micro < kAccum; ++micro) {
      const data::TokenBatch b = random_batch(kBatch, kSeq, 97, static_cast<uint32_t>(10 * step + micro));
      if (step_runner) {
        trace.losses.push_back(step_runner->micro_batch(b));
        if (cache) {
          trace.ce.push_back(step_runner->last_metrics().at("ce"));
          trace.kd.push_back(step_runner->last_metrics().at("kd"));
        }
        continue;
      }
      const Tensor inputs = Tensor::from_ints(b.inputs, {kBatch, kSeq}, device);
      const Tensor targets = Tensor::from_ints(b.targets, {kBatch, kSeq});
      const Tensor logits = model.forward(inputs, dtype);
      Tensor loss;
      if (cache) {
        // The eager objective's arithmetic (CacheDistillationObjective::micro_batch_loss), written out.
        loss = losses::topk_distillation_loss(logits, cache_targets_for_batch(*cache->reader, b), cache->options);
        const double ce = plain_cross_entropy(logits, targets.to(device), -100), r = cache->options.kd_ratio;
        trace.ce.push_back(ce);
        trace.kd.push_back((loss.item() - (1 - r) * ce) / r);
      } else {
        loss = losses::cross_entropy(logits, targets);
      }
      trace.losses.push_back(loss.item());
      ops::scale(loss, 1.0 / kAccum).backward();
    }
    if (step_runner) {
      trace.norms.push_back(step_runner->update(lr_at(step)));
    } else {
      trace.norms.push_back(optim::clip_grad_norm(model.parameters(), kClip));
      optimizer.step(lr_at(step));
      optimizer.zero_grad();
    }
  }
  EXPECT_EQ(optimizer.steps(), kSteps);
  for (const Tensor& p : model.parameters()) trace.weights.push_back(p.to_floats());
  if (graphed_at_end) *graphed_at_end = step_runner && step_runner->graphed();
  if (step_runner && !step_runner->fallback_reason().empty())
    ADD_FAILURE() << "fell back to eager steps: " << step_runner->fallback_reason();
  return trace;
}

void expect_same_training(const Trace& eager, const Trace& graphed, double tolerance) {
  ASSERT_EQ(eager.losses.size(), graphed.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i)
    EXPECT_NEAR(graphed.losses[i], eager.losses[i], tolerance * eager.losses[i]) << "loss of micro-batch " << i;
  ASSERT_EQ(eager.ce.size(), graphed.ce.size());
  for (size_t i = 0; i < eager.ce.size(); ++i) {
    EXPECT_NEAR(graphed.ce[i], eager.ce[i], tolerance * eager.ce[i]) << "ce of micro-batch " << i;
    EXPECT_NEAR(graphed.kd[i], eager.kd[i], 10 * tolerance * std::abs(eager.kd[i])) << "kd of micro-batch " << i;
  }
  for (size_t i = 0; i < eager.norms.size(); ++i) {
    EXPECT_NEAR(graphed.norms[i], eager.norms[i], tolerance * eager.norms[i]) << "gradient norm of step " << i;
    EXPECT_GT(eager.norms[i], kClip) << "the clip must apply for the test to cover it";
  }
  double worst = 0;
  for (size_t t = 0; t < eager.weights.size(); ++t)
    for (size_t k = 0; k < eager.weights[t].size(); ++k)
      worst = std::max(worst, static_cast<double>(std::abs(eager.weights[t][k] - graphed.weights[t][k])));
  EXPECT_LT(worst, tolerance) << "largest weight difference after " << kSteps << " steps";
}

TEST(GraphedTrainStep, CpuMatchesTheEagerLoop) {
  expect_same_training(train(Device::cpu(), DType::F32, false), train(Device::cpu(), DType::F32, true), 1e-5);
}

TEST(GraphedTrainStep, CpuCacheDistillationMatchesTheEagerObjective) {
  const TeacherCache cache;
  const Trace eager = train(Device::cpu(), DType::F32, false, nullptr, &cache);
  expect_same_training(eager, train(Device::cpu(), DType::F32, true, nullptr, &cache), 1e-5);
  // Not a cross-entropy in disguise: the KD part differs from the CE.
  EXPECT_GT(std::abs(eager.kd[0] - eager.ce[0]), 1e-3);
}

TEST(GraphedTrainStep, RefusesABadTargetOnTheHost) {
  GptModel model(tiny_config());
  model.initialize(3);
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), 0.1), {});
  GraphedStepOptions options;
  options.batch = kBatch;
  options.seq = kSeq;
  GraphedTrainStep step(model, optimizer, options, Device::cpu());
  data::TokenBatch b = random_batch(kBatch, kSeq, 97, 1);
  b.targets[5] = 97;
  expect_throw_containing([&] { step.micro_batch(b); }, "outside the vocabulary of 97");
  b = random_batch(kBatch, kSeq + 1, 97, 1);
  b.seq = kSeq + 1;
  expect_throw_containing([&] { step.micro_batch(b); }, "recorded at 2 x 16");
  // The cache's loss checks the labels and the teacher's ids: a model of a smaller vocabulary than the cache's ids.
  const TeacherCache cache;
  GptConfig small = tiny_config();
  small.vocab_size = 40;
  GptModel narrow(small);
  narrow.initialize(3);
  optim::AdamW narrow_optimizer(optim::decay_groups(narrow.named_parameters(), 0.1), {});
  options.loss = graphable_cache_loss(*cache.reader, cache.options);
  GraphedTrainStep distill_step(narrow, narrow_optimizer, options, Device::cpu());
  b = random_batch(kBatch, kSeq, 40, 1);
  expect_throw_containing([&] { distill_step.micro_batch(b); }, "is outside the vocabulary of 40");
}

TEST(GraphedTrainStepCuda, ReplaysGraphsAndMatchesTheEagerLoop) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    bool graphed = false;
    const Trace with_graphs = train(Device::cuda(0), dtype, true, &graphed);
    EXPECT_TRUE(graphed) << "the steps after the second did not replay CUDA graphs";
    // bf16: the same kernels in the same order; only the norm's summation order differs from the eager loop's.
    expect_same_training(train(Device::cuda(0), dtype, false), with_graphs, dtype == DType::F32 ? 1e-5 : 1e-3);
    SCOPED_TRACE("top-k cache distillation");
    const TeacherCache cache;
    graphed = false;
    const Trace distilled = train(Device::cuda(0), dtype, true, &graphed, &cache);
    EXPECT_TRUE(graphed) << "the distillation steps after the second did not replay CUDA graphs";
    expect_same_training(train(Device::cuda(0), dtype, false, nullptr, &cache), distilled,
                         dtype == DType::F32 ? 1e-5 : 1e-3);
  }
}

}  // namespace
}  // namespace retort::distill
