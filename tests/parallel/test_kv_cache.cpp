// Attention over a key/value cache and the GPT's cached forward. The op against float64 attention written here;
// the model's cached logits, step by step, against its full forward over the whole prefix (the definition of
// what the cache must reproduce), for a right-padded batch of prompts of different lengths with rows that skip
// steps, at tp 1, 2 and 4 (each rank's local logits against its vocabulary slice of the dense model's); errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/ops/ops.h"
#include "core/tensor/slicing.h"
#include "parallel/comm/thread_ranks.h"
#include "parallel/generate/kv_cache.h"
#include "parallel/gpt_model.h"
#include "tests/test_support.h"
#include "tp_test_support.h"

namespace retort {
namespace {

std::vector<double> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = static_cast<float>(normal(gen));
  return v;
}

// Float64 attention of query t of row b over keys [0, start + t]: the cache's old keys below start, then the
// new ones from qkv.
struct AttentionCase {
  int64_t B = 3, Tn = 1, H = 2, D = 8, cap = 12;
  std::vector<int64_t> starts{0, 4, 9};
};

void check_op_against_float64(const AttentionCase& c, DType dtype, Device device, double tolerance) {
  const int64_t C = c.H * c.D;
  const std::vector<double> qkv = random_values(static_cast<size_t>(c.B * c.Tn * 3 * C), 1);
  const std::vector<double> k0 = random_values(static_cast<size_t>(c.B * c.H * c.cap * c.D), 2);
  const std::vector<double> v0 = random_values(static_cast<size_t>(c.B * c.H * c.cap * c.D), 3);
  Tensor k_cache = Tensor::from_doubles(k0, {c.B, c.H, c.cap, c.D}, DType::F64).to(dtype).to(device);
  Tensor v_cache = Tensor::from_doubles(v0, {c.B, c.H, c.cap, c.D}, DType::F64).to(dtype).to(device);
  const Tensor qkv_t = Tensor::from_doubles(qkv, {c.B, c.Tn, 3 * C}, DType::F64).to(dtype);
  // The reference reads the values as the op sees them (rounded to dtype).
  const std::vector<double> q_r = qkv_t.to_doubles();
  const std::vector<double> k_r = Tensor::from_doubles(k0, {c.B, c.H, c.cap, c.D}, DType::F64).to(dtype).to_doubles();
  const std::vector<double> v_r = Tensor::from_doubles(v0, {c.B, c.H, c.cap, c.D}, DType::F64).to(dtype).to_doubles();
  NoGradGuard no_grad;
  const Tensor out = ops::attention_with_kv_cache(qkv_t.to(device), k_cache, v_cache, c.starts, static_cast<int>(c.H));
  const std::vector<double> got = out.to_doubles(), k_after = k_cache.to_doubles(), v_after = v_cache.to_doubles();
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t s = c.starts[static_cast<size_t>(b)];
      auto key = [&](int64_t j, int64_t d) {
        return j < s ? k_r[static_cast<size_t>(((b * c.H + h) * c.cap + j) * c.D + d)]
                     : q_r[static_cast<size_t>((b * c.Tn + (j - s)) * 3 * C + C + h * c.D + d)];
      };
      auto value = [&](int64_t j, int64_t d) {
        return j < s ? v_r[static_cast<size_t>(((b * c.H + h) * c.cap + j) * c.D + d)]
                     : q_r[static_cast<size_t>((b * c.Tn + (j - s)) * 3 * C + 2 * C + h * c.D + d)];
      };
      for (int64_t t = 0; t < c.Tn; ++t) {
        const int64_t seen = std::min(s + t + 1, c.cap);
        std::vector<double> p(static_cast<size_t>(seen));
        double m = -INFINITY, total = 0;
        for (int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d)
            dot += q_r[static_cast<size_t>((b * c.Tn + t) * 3 * C + h * c.D + d)] * key(j, d);
          p[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(c.D));
          m = std::max(m, p[static_cast<size_t>(j)]);
        }
        for (auto& x : p) total += (x = std::exp(x - m));
        for (int64_t d = 0; d < c.D; ++d) {
          double want = 0;
          for (int64_t j = 0; j < seen; ++j) want += p[static_cast<size_t>(j)] / total * value(j, d);
          const double have = got[static_cast<size_t>((b * c.Tn + t) * C + h * c.D + d)];
          ASSERT_NEAR(have, want, tolerance) << "row " << b << " head " << h << " query " << t << " dim " << d;
        }
      }
      // The cache now holds the new keys and values at start .. start + Tn - 1 and is untouched elsewhere.
      for (int64_t j = 0; j < c.cap; ++j)
        for (int64_t d = 0; d < c.D; ++d) {
          const size_t at = static_cast<size_t>(((b * c.H + h) * c.cap + j) * c.D + d);
          const bool fresh = j >= s && j < s + c.Tn;
          ASSERT_EQ(k_after[at], fresh ? key(j, d) : k_r[at]) << "key slot " << j << " of row " << b;
          ASSERT_EQ(v_after[at], fresh ? value(j, d) : v_r[at]) << "value slot " << j << " of row " << b;
        }
    }
}

TEST(AttentionWithCache, MatchesFloat64AttentionOnTheCpu) {
  for (int64_t Tn : {1, 3}) {
    AttentionCase c;
    c.Tn = Tn;
    check_op_against_float64(c, DType::F32, Device::cpu(), 1e-5);
    check_op_against_float64(c, DType::F64, Device::cpu(), 1e-12);
  }
}

TEST(AttentionWithCache, MatchesFloat64AttentionOnTheGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t D : {16, 64, 128}) {
    for (int64_t Tn : {1, 5}) {
      AttentionCase c;
      c.Tn = Tn;
      c.D = D;
      c.cap = 40;
      c.starts = {0, 17, 35};
      check_op_against_float64(c, DType::F32, Device::cuda(0), 1e-5);
      // bf16 inputs are rounded in the reference too; the output's own rounding is 2^-8 relative.
      check_op_against_float64(c, DType::BF16, Device::cuda(0), 2e-2);
    }
  }
  // The decode shape of generation: batch 32, a context of 1024, head_dim 64.
  AttentionCase big;
  big.B = 32;
  big.H = 2;
  big.D = 64;
  big.cap = 1024;
  big.starts.clear();
  for (int64_t b = 0; b < big.B; ++b) big.starts.push_back(b * 31 % 1024);
  check_op_against_float64(big, DType::F32, Device::cuda(0), 1e-5);
}

GptConfig small_config() {
  GptConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.init_std = 0.2;  // a visibly non-uniform model, so that wrong positions or keys change the logits
  return c;
}

// Three prompts of different lengths, prefilled together right-padded, then decoded with some rows skipping
// steps. After every call each active row's logits must equal the full forward over that row's whole sequence at
// its last position. `slice` maps the dense logits to what this rank holds.
void check_cached_against_full(const GptModel& model, const GptModel& dense, DType dtype, Device device,
                               double tolerance, const std::string& what) {
  const std::vector<std::vector<int32_t>> prompts{{3, 9, 27, 17, 51}, {44, 2}, {8, 8, 60, 1, 33, 19, 7}};
  const int64_t B = 3, width = 7, vocab_local = model.config().vocab_size / tp::group_size(model.tp_group());
  const int64_t first = tp::group_rank(model.tp_group()) * vocab_local;
  std::vector<std::vector<int32_t>> sequences = prompts;
  generate::KvCache cache(model, B, model.config().block_size, dtype, device);
  std::vector<int32_t> padded(static_cast<size_t>(B * width), 0);
  std::vector<int64_t> valid;
  for (int64_t b = 0; b < B; ++b) {
    std::copy(prompts[b].begin(), prompts[b].end(), padded.begin() + b * width);
    valid.push_back(static_cast<int64_t>(prompts[b].size()));
  }
  auto compare = [&](const Tensor& logits, const std::vector<int64_t>& rows_valid, const std::string& step) {
    ASSERT_EQ(logits.shape(), Shape({B, vocab_local})) << what << " " << step;
    const std::vector<double> got = logits.to_doubles();
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
  compare(model.forward_cached(Tensor::from_ints(padded, {B, width}, device), valid, cache, dtype), valid, "prefill");
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({5, 2, 7}));
  // Decode: row 1 sits out steps 1 and 3 (a finished sequence keeps its place in the batch).
  for (int step = 0; step < 6; ++step) {
    std::vector<int32_t> next;
    std::vector<int64_t> step_valid;
    for (int64_t b = 0; b < B; ++b) {
      const bool active = !(b == 1 && (step == 1 || step == 3));
      const int32_t token = static_cast<int32_t>((step * 13 + b * 7 + 5) % 64);
      next.push_back(token);
      step_valid.push_back(active ? 1 : 0);
      if (active) sequences[static_cast<size_t>(b)].push_back(token);
    }
    compare(model.forward_cached(Tensor::from_ints(next, {B, 1}, device), step_valid, cache, dtype), step_valid,
            "decode step " + std::to_string(step));
  }
  EXPECT_EQ(cache.lengths(), std::vector<int64_t>({11, 6, 13}));
}

TEST(GptKvCache, CachedLogitsEqualTheFullForwardAtEveryStep) {
  GptModel dense(small_config());
  dense.initialize(7);
  for (bool tied : {true, false}) {
    GptConfig config = small_config();
    config.tie_weights = tied;
    GptModel model(config), reference(config);
    model.initialize(7);
    reference.initialize(7);
    check_cached_against_full(model, reference, DType::F32, Device::cpu(), 1e-5, tied ? "tied" : "untied");
  }
}

TEST(GptKvCache, EveryTpRankHoldsItsSliceOfTheDenseLogits) {
  GptModel dense(small_config());
  dense.initialize(7);
  for (int tp : tp_testing::kTpSizes) {
    run_ranks(tp, [&](std::shared_ptr<Communicator> comm) {
      GptModel model(small_config(), comm);
      model.initialize(7);
      check_cached_against_full(model, dense, DType::F32, Device::cpu(), 1e-5, "tp " + std::to_string(tp));
    });
  }
}

TEST(GptKvCache, OnTheGpuInF32AndBf16) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  GptModel dense(small_config());
  dense.initialize(7);
  GptModel model(small_config());
  model.initialize(7);
  model.to(Device::cuda(0));
  check_cached_against_full(model, dense, DType::F32, Device::cuda(0), 2e-5, "cuda f32");
  // bf16 activations round every layer's output to 8 bits of mantissa: logits of size ~1 move by ~1e-2.
  check_cached_against_full(model, dense, DType::BF16, Device::cuda(0), 6e-2, "cuda bf16");
}

TEST(GptKvCache, BadSizesAreErrors) {
  GptModel model(small_config());
  model.initialize(7);
  EXPECT_THROW(generate::KvCache(model, 2, 17, DType::F32, Device::cpu()), InputError);
  EXPECT_THROW(generate::KvCache(model, 0, 8, DType::F32, Device::cpu()), InputError);
  generate::KvCache cache(model, 1, 4, DType::F32, Device::cpu());
  model.forward_cached(Tensor::from_ints({1, 2, 3}, {1, 3}), {3}, cache);
  const std::string message = testing::message_of([&] {
    model.forward_cached(Tensor::from_ints({4, 5}, {1, 2}), {2}, cache);
  });
  EXPECT_NE(message.find("context is full"), std::string::npos) << message;
  EXPECT_EQ(cache.length(0), 3);  // the failed call changed nothing
  EXPECT_THROW(model.forward_cached(Tensor::from_ints({4, 5}, {2, 1}), {1, 1}, cache), Error);
}

}  // namespace
}  // namespace retort
