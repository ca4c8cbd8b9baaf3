#pragma once
// Shared by the on-policy tests: a tiny student and teacher of one vocabulary, a data batch of random windows, and
// the float64 reference of the on-policy loss and its gradient wrt the student's logits, written out here.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/data/loader.h"
#include "distill/onpolicy/on_policy_options.h"
#include "parallel/models/gpt_model.h"

namespace retort::distill::on_policy_testing {

constexpr int64_t kVocab = 64;  // divides by the tp sizes 1, 2 and 4

inline GptConfig tiny_config() {
  GptConfig c;
  c.vocab_size = kVocab;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.init_std = 0.2;  // visibly peaked distributions, so a wrong position or token changes the numbers
  return c;
}

// `rows` windows of `seq` random tokens, at stream positions 100 r (the rollout keys a row's draws by them).
inline data::TokenBatch random_batch(int64_t rows, int64_t seq, uint32_t seed) {
  std::mt19937 gen(seed);
  data::TokenBatch b;
  b.batch = rows;
  b.seq = seq;
  for (int64_t i = 0; i < rows * seq; ++i) b.inputs.push_back(static_cast<int32_t>(gen() % kVocab));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < seq; ++t)
      b.targets.push_back(t + 1 < seq ? b.inputs[static_cast<size_t>(r * seq + t + 1)] : 0);
  for (int64_t r = 0; r < rows; ++r) b.window_starts.push_back(100 * r);
  return b;
}

// log-softmax of x / T in float64.
inline std::vector<double> log_softmax(const double* x, int64_t n, double T) {
  double m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j] / T);
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] / T - m);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(j)] = x[j] / T - m - std::log(s);
  return out;
}

struct Reference {
  double loss = 0;
  std::vector<double> grad;  // [rows, V]
};

// The loss of OnPolicyOptions over dense student and teacher logits [rows, V] (row-major doubles) at the rows whose
// target is not ignore_index: T^2 x the mean per-row divergence, and its gradient wrt the student's logits.
//   reverse KL(q || p) = sum q (log q - log p), d/dx_j = (1/T) q_j (log q_j - log p_j - KL)
//   forward KL(p || q) = sum p (log p - log q), d/dx_j = (1/T) (q_j - p_j)
inline Reference reference_loss(const std::vector<double>& student, const std::vector<double>& teacher,
                                const std::vector<int32_t>& targets, const OnPolicyOptions& o) {
  const int64_t rows = static_cast<int64_t>(targets.size()), V = static_cast<int64_t>(student.size()) / rows;
  const double T = o.kd_temperature;
  const double w_forward = o.divergence == OnPolicyDivergence::Forward ? 1.0
                           : o.divergence == OnPolicyDivergence::Mixed ? o.mix
                                                                       : 0.0;
  int64_t valid = 0;
  for (int32_t t : targets) valid += t != o.ignore_index;
  Reference r;
  r.grad.assign(student.size(), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    if (targets[static_cast<size_t>(i)] == o.ignore_index) continue;
    const std::vector<double> lq = log_softmax(student.data() + i * V, V, T);
    const std::vector<double> lp = log_softmax(teacher.data() + i * V, V, T);
    double reverse = 0, forward = 0;
    for (int64_t j = 0; j < V; ++j) {
      reverse += std::exp(lq[j]) * (lq[j] - lp[j]);
      forward += std::exp(lp[j]) * (lp[j] - lq[j]);
    }
    r.loss += T * T * (w_forward * forward + (1 - w_forward) * reverse) / static_cast<double>(valid);
    for (int64_t j = 0; j < V; ++j) {
      const double q = std::exp(lq[j]), p = std::exp(lp[j]);
      const double g = w_forward * (q - p) + (1 - w_forward) * q * (lq[j] - lp[j] - reverse);
      r.grad[static_cast<size_t>(i * V + j)] = T * g / static_cast<double>(valid);
    }
  }
  return r;
}

}  // namespace retort::distill::on_policy_testing
