#pragma once
// A plain dense float64 reference of the cross-tokenizer losses (losses/chunk_distillation.h), written from the
// formulas over the FULL vocabularies: the student's softmax over all V_s ids, the teacher's distribution over all
// V_t ids (listed log-probs, rest_t / (V_t - K) elsewhere), Q through the dense projection matrix, the rest bucket
// as the dense sum over the ids outside S_c. The gradient is the chain rule written densely (dKL/dQ, through W,
// through the softmax Jacobian); the finite-difference tests check it independently. Plus the hand-made problem the
// tests share: an alignment with every chunk shape.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/tensor/tensor.h"
#include "losses/chunk_distillation.h"

namespace retort::chunk_testing {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct ChunkProblem {
  int64_t rows = 0;         // N_s
  int64_t vocab = 0;        // V_s
  int64_t vocab_local = 0;  // ceil(V_s / tp), set per tp
  int64_t teacher_rows = 0, teacher_vocab = 0, topk = 0, chunk_count = 0;
  std::vector<double> logits;          // [N_s, V_s]
  std::vector<int32_t> labels;         // [N_s]
  std::vector<int32_t> student_chunk;  // [N_s]
  std::vector<int32_t> teacher_chunk;  // [N_t]
  std::vector<int32_t> teacher_ids;    // [N_t, K]
  std::vector<double> teacher_logprobs;
  std::vector<int32_t> row_offsets, proj_ids;  // CSR projection
  std::vector<double> proj_weights;
  std::vector<int32_t> common_student, common_teacher;

  std::vector<double> dense_projection() const {
    std::vector<double> w(static_cast<size_t>(vocab * teacher_vocab), 0.0);
    for (int64_t u = 0; u < vocab; ++u)
      for (int32_t e = row_offsets[u]; e < row_offsets[u + 1]; ++e)
        w[static_cast<size_t>(u * teacher_vocab + proj_ids[e])] += proj_weights[e];
    return w;
  }
  losses::VocabProjection projection() const {
    losses::VocabProjection p;
    p.student_vocab = vocab;
    p.teacher_vocab = teacher_vocab;
    p.row_offsets = Tensor::from_ints(row_offsets, {vocab + 1});
    p.teacher_ids = Tensor::from_ints(proj_ids, {static_cast<int64_t>(proj_ids.size())});
    p.weights = Tensor::from_doubles(proj_weights, {static_cast<int64_t>(proj_weights.size())}, DType::F32);
    return p;
  }
  losses::ChunkTeacherTargets teacher() const {
    return {Tensor::from_ints(teacher_ids, {teacher_rows, topk}),
            Tensor::from_doubles(teacher_logprobs, {teacher_rows, topk}, DType::F32)};
  }
  losses::ChunkAssignment chunks() const {
    return {Tensor::from_ints(student_chunk, {rows}), Tensor::from_ints(teacher_chunk, {teacher_rows}), chunk_count};
  }
  losses::CommonIds common() const {
    const int64_t n = static_cast<int64_t>(common_student.size());
    return {Tensor::from_ints(common_student, {n}), Tensor::from_ints(common_teacher, {n})};
  }
};

// The values as f32 stores them (projection weights and teacher log-probs travel as f32).
inline double as_f32(double v) {
  return static_cast<double>(static_cast<float>(v));
}

// Every chunk shape: 1:1, 1:N, N:1, N:M, a student-only chunk, a teacher-only chunk, an empty chunk id, positions
// in no chunk (-1) on both sides; one teacher log-prob -inf; one student id with an empty projection row, two
// teacher ids no student id maps to; exact (weight 1) maps and split ones.
inline ChunkProblem hand_made_problem(uint32_t seed = 7) {
  ChunkProblem p;
  p.rows = 11;
  p.vocab = 11;  // odd: the last shard is padded at tp 2 (6 + 5) and tp 4 (3 + 3 + 3 + 2)
  p.teacher_rows = 10;
  p.teacher_vocab = 13;
  p.topk = 3;
  p.chunk_count = 8;
  //                 s0 s1 s2 s3 s4 s5 s6 s7  s8 s9 s10
  p.student_chunk = {0, 1, 2, 2, 3, 3, 3, 4, -1, 7, 7};
  //                 t0 t1 t2 t3 t4 t5 t6  t7 t8 t9
  p.teacher_chunk = {0, 1, 1, 2, 3, 3, 5, -1, 7, 7};
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.5);
  p.logits.resize(static_cast<size_t>(p.rows * p.vocab));
  for (double& v : p.logits) v = normal(rng);
  p.labels.resize(static_cast<size_t>(p.rows));
  for (int64_t r = 0; r < p.rows; ++r) p.labels[r] = static_cast<int32_t>((3 * r + 1) % p.vocab);
  p.labels[2] = -100;
  // Teacher: K distinct ids per position with log-probs of a random distribution over V_t (so sum_k p < 1).
  std::uniform_int_distribution<int> pick(0, static_cast<int>(p.teacher_vocab) - 1);
  for (int64_t t = 0; t < p.teacher_rows; ++t) {
    std::vector<double> logits(static_cast<size_t>(p.teacher_vocab));
    for (double& v : logits) v = 2.0 * normal(rng);
    const double m = *std::max_element(logits.begin(), logits.end());
    double s = 0;
    for (double v : logits) s += std::exp(v - m);
    std::set<int> chosen;
    while (static_cast<int64_t>(chosen.size()) < p.topk) chosen.insert(pick(rng));
    for (int v : chosen) {
      p.teacher_ids.push_back(v);
      p.teacher_logprobs.push_back(as_f32(logits[static_cast<size_t>(v)] - m - std::log(s)));
    }
  }
  p.teacher_logprobs[4] = kNegInf;  // position 1, slot 1: an impossible token
  // Projection: id 5 maps to nothing; teacher ids 11 and 12 are reached by no student id.
  p.row_offsets.push_back(0);
  for (int64_t u = 0; u < p.vocab; ++u) {
    if (u != 5) {
      const int n = 1 + static_cast<int>(u % 3);  // 1, 2 or 3 entries
      std::vector<double> w(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) w[i] = 0.9 * std::pow(0.1, i);
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      for (int i = 0; i < n; ++i) {
        p.proj_ids.push_back(static_cast<int32_t>((u * 5 + 3 * i) % 11));
        p.proj_weights.push_back(as_f32(w[i] / total));
      }
    }
    p.row_offsets.push_back(static_cast<int32_t>(p.proj_ids.size()));
  }
  // Common pairs for the gold loss: the exactly mapped ids (one entry of weight 1).
  for (int64_t u = 0; u < p.vocab; ++u)
    if (p.row_offsets[u + 1] - p.row_offsets[u] == 1) {
      p.common_student.push_back(static_cast<int32_t>(u));
      p.common_teacher.push_back(p.proj_ids[p.row_offsets[u]]);
    }
  return p;
}

// A larger problem with a realistic alignment: chunks of 1 to 3 positions on each side, about one position in 20
// in no chunk; each student id maps to 1 to 3 teacher ids (weights 0.9 * 0.1^i normalised), one in 50 to none.
inline ChunkProblem random_problem(int64_t rows, int64_t vocab, int64_t teacher_vocab, int64_t topk, uint32_t seed) {
  ChunkProblem p;
  p.rows = rows;
  p.vocab = vocab;
  p.teacher_vocab = teacher_vocab;
  p.topk = topk;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> size(1, 3), percent(0, 99);
  std::normal_distribution<double> normal(0.0, 2.0);
  int32_t chunk = 0;
  while (static_cast<int64_t>(p.student_chunk.size()) < rows) {
    if (percent(rng) < 5) {
      p.student_chunk.push_back(-1);
      p.teacher_chunk.push_back(-1);
      continue;
    }
    const int ns = size(rng), nt = size(rng);
    for (int i = 0; i < ns && static_cast<int64_t>(p.student_chunk.size()) < rows; ++i)
      p.student_chunk.push_back(chunk);
    for (int i = 0; i < nt; ++i) p.teacher_chunk.push_back(chunk);
    ++chunk;
  }
  p.chunk_count = chunk;
  p.teacher_rows = static_cast<int64_t>(p.teacher_chunk.size());
  p.logits.resize(static_cast<size_t>(rows * vocab));
  for (double& v : p.logits) v = normal(rng);
  p.labels.resize(static_cast<size_t>(rows));
  std::uniform_int_distribution<int> student_id(0, static_cast<int>(vocab) - 1);
  std::uniform_int_distribution<int> teacher_id(0, static_cast<int>(teacher_vocab) - 1);
  for (auto& l : p.labels) l = student_id(rng);
  // Teacher rows: K distinct ids, log-probs of a peaked distribution holding most (not all) of the mass.
  for (int64_t t = 0; t < p.teacher_rows; ++t) {
    std::set<int> chosen;
    while (static_cast<int64_t>(chosen.size()) < topk) chosen.insert(teacher_id(rng));
    std::vector<double> raw;
    for (int64_t i = 0; i < topk; ++i) raw.push_back(normal(rng));
    const double m = *std::max_element(raw.begin(), raw.end());
    double s = 0;
    for (double v : raw) s += std::exp(v - m);
    int64_t i = 0;
    for (int v : chosen) {
      p.teacher_ids.push_back(v);
      p.teacher_logprobs.push_back(as_f32(raw[static_cast<size_t>(i++)] - m - std::log(s) + std::log(0.9)));
    }
  }
  p.row_offsets.push_back(0);
  for (int64_t u = 0; u < vocab; ++u) {
    if (percent(rng) >= 2) {
      const int n = size(rng);
      std::set<int> ids;
      while (static_cast<int>(ids.size()) < n) ids.insert(teacher_id(rng));
      double total = 0;
      for (int i = 0; i < n; ++i) total += 0.9 * std::pow(0.1, i);
      int i = 0;
      for (int v : ids) {
        p.proj_ids.push_back(v);
        p.proj_weights.push_back(as_f32(0.9 * std::pow(0.1, i++) / total));
      }
    }
    p.row_offsets.push_back(static_cast<int32_t>(p.proj_ids.size()));
  }
  for (int64_t u = 0; u < vocab; ++u)
    if (p.row_offsets[u + 1] - p.row_offsets[u] == 1) {
      const int32_t v = p.proj_ids[p.row_offsets[u]];
      if (std::find(p.common_teacher.begin(), p.common_teacher.end(), v) != p.common_teacher.end()) continue;
      p.common_student.push_back(static_cast<int32_t>(u));
      p.common_teacher.push_back(v);
    }
  return p;
}

struct DenseResult {
  double loss = 0, kd = 0, ce = 0;
  std::vector<double> grad;  // [N_s, V_s]
};

struct ReferenceOptions {
  double temperature = 1.0;
  bool t_squared = true;
  double kd_ratio = 1.0;
  bool dynamic = false;
  double normalizer = 0;  // 0: the valid chunks
  bool gold = false;
  int64_t gold_top = 8192;
};

// The teacher's full distribution at position t (log-probs over all V_t ids).
inline std::vector<double> teacher_row(const ChunkProblem& p, int64_t t) {
  double listed = 0;
  for (int64_t i = 0; i < p.topk; ++i) listed += std::exp(p.teacher_logprobs[t * p.topk + i]);
  const double rest = -std::expm1(std::min(std::log(listed), -1e-7));
  std::vector<double> row(static_cast<size_t>(p.teacher_vocab),
                          std::log(rest / static_cast<double>(p.teacher_vocab - p.topk)));
  for (int64_t i = 0; i < p.topk; ++i) row[p.teacher_ids[t * p.topk + i]] = p.teacher_logprobs[t * p.topk + i];
  return row;
}

// The student's log-softmax rows at temperature T.
inline std::vector<std::vector<double>> student_logq(const ChunkProblem& p, double T) {
  std::vector<std::vector<double>> out(static_cast<size_t>(p.rows));
  for (int64_t r = 0; r < p.rows; ++r) {
    const double* x = p.logits.data() + r * p.vocab;
    double m = kNegInf;
    for (int64_t j = 0; j < p.vocab; ++j) m = std::max(m, x[j] / T);
    double s = 0;
    for (int64_t j = 0; j < p.vocab; ++j) s += std::exp(x[j] / T - m);
    for (int64_t j = 0; j < p.vocab; ++j) out[r].push_back(x[j] / T - m - std::log(s));
  }
  return out;
}

inline double xlogy_term(double r, double log_q) {
  return r == kNegInf ? 0.0 : std::exp(r) * (r - log_q);
}

// The chunk-averaged KL (or the gold loss), plus CE mixing: loss and dense gradient wrt the logits.
inline DenseResult dense_reference(const ChunkProblem& p, const ReferenceOptions& o) {
  const double T = o.temperature;
  const auto logq = student_logq(p, T);
  const std::vector<double> W = p.dense_projection();
  DenseResult out;
  std::vector<double> dz(static_cast<size_t>(p.rows * p.vocab), 0.0);  // d(sum KL_c)/dz
  int valid = 0;
  for (int32_t c = 0; c < p.chunk_count; ++c) {
    std::vector<int64_t> ps, pt;
    for (int64_t r = 0; r < p.rows; ++r)
      if (p.student_chunk[r] == c) ps.push_back(r);
    for (int64_t t = 0; t < p.teacher_rows; ++t)
      if (p.teacher_chunk[t] == c) pt.push_back(t);
    if (ps.empty() || pt.empty()) continue;
    ++valid;
    const double ns = static_cast<double>(ps.size()), nt = static_cast<double>(pt.size());
    std::vector<double> R(static_cast<size_t>(p.teacher_vocab), 0.0);  // mean log p over P_t(c)
    for (int64_t t : pt) {
      const auto row = teacher_row(p, t);
      for (int64_t v = 0; v < p.teacher_vocab; ++v) R[v] += row[v] / nt;
    }
    // dsum/dLS or dsum/d(projected q) per student id, the same for every row of the chunk.
    std::vector<double> h(static_cast<size_t>(p.vocab), 0.0);
    double kl = 0;
    if (!o.gold) {
      std::set<int32_t> S;
      for (int64_t t : pt)
        for (int64_t i = 0; i < p.topk; ++i) S.insert(p.teacher_ids[t * p.topk + i]);
      // Q over all teacher ids through the dense W, then the S columns and the rest bucket.
      std::vector<double> Qall(static_cast<size_t>(p.teacher_vocab), 0.0);
      for (int64_t r : ps)
        for (int64_t u = 0; u < p.vocab; ++u)
          for (int64_t v = 0; v < p.teacher_vocab; ++v)
            Qall[v] += std::exp(logq[r][u]) * W[u * p.teacher_vocab + v] / ns;
      double q_rest = 0;
      for (int64_t v = 0; v < p.teacher_vocab; ++v)
        if (!S.count(static_cast<int32_t>(v))) q_rest += Qall[v];
      // The teacher's rest: the mean over P_t of the log of its mass outside S (a dense sum).
      double r_rest = 0;
      for (int64_t t : pt) {
        const auto row = teacher_row(p, t);
        double mass = 0;
        for (int64_t v = 0; v < p.teacher_vocab; ++v)
          if (!S.count(static_cast<int32_t>(v))) mass += std::exp(row[v]);
        r_rest += std::log(mass) / nt;
      }
      std::vector<double> dQ(static_cast<size_t>(p.teacher_vocab));
      const double eps = 1e-10;
      for (int64_t v = 0; v < p.teacher_vocab; ++v) {
        if (!S.count(static_cast<int32_t>(v))) continue;
        kl += xlogy_term(R[v], std::log(Qall[v] + eps));
        dQ[v] = R[v] == kNegInf ? 0 : -std::exp(R[v]) / (Qall[v] + eps);
      }
      kl += xlogy_term(r_rest, std::log(q_rest + eps));
      const double d_rest = r_rest == kNegInf ? 0 : -std::exp(r_rest) / (q_rest + eps);
      for (int64_t v = 0; v < p.teacher_vocab; ++v)
        if (!S.count(static_cast<int32_t>(v))) dQ[v] = d_rest;
      // h_u = dKL/dq_t,u = sum_v W_u,v dKL/dQ_v / n_s.
      for (int64_t u = 0; u < p.vocab; ++u)
        for (int64_t v = 0; v < p.teacher_vocab; ++v) h[u] += W[u * p.teacher_vocab + v] * dQ[v] / ns;
      // Through the softmax: dKL/dz_t,j = q_j (h_j - sum_u q_u h_u).
      for (int64_t r : ps) {
        double centre = 0;
        for (int64_t u = 0; u < p.vocab; ++u) centre += std::exp(logq[r][u]) * h[u];
        for (int64_t j = 0; j < p.vocab; ++j) dz[r * p.vocab + j] += std::exp(logq[r][j]) * (h[j] - centre);
      }
    } else {
      // LS_c,u = mean over P_s(c) of log q; g_u = dGold/dLS_c,u.
      std::vector<double> LS(static_cast<size_t>(p.vocab), 0.0), g(static_cast<size_t>(p.vocab), 0.0);
      for (int64_t r : ps)
        for (int64_t u = 0; u < p.vocab; ++u) LS[u] += logq[r][u] / ns;
      std::set<int32_t> common_s(p.common_student.begin(), p.common_student.end());
      std::set<int32_t> common_t(p.common_teacher.begin(), p.common_teacher.end());
      for (size_t i = 0; i < p.common_student.size(); ++i) {
        const int32_t u = p.common_student[i], v = p.common_teacher[i];
        kl += xlogy_term(R[v], LS[u]);
        if (R[v] != kNegInf) g[u] += -std::exp(R[v]);
      }
      std::vector<std::pair<double, int32_t>> a;  // (prob, student id) over uncommon ids
      for (int32_t u = 0; u < p.vocab; ++u)
        if (!common_s.count(u)) a.push_back({std::exp(LS[u]), u});
      std::vector<double> b;
      for (int32_t v = 0; v < p.teacher_vocab; ++v)
        if (!common_t.count(v)) b.push_back(std::exp(R[v]));
      std::sort(a.begin(), a.end(), [](auto x, auto y) { return x.first > y.first; });
      std::sort(b.begin(), b.end(), std::greater<>());
      const size_t na = std::min<size_t>(a.size(), static_cast<size_t>(o.gold_top));
      const size_t nb = std::min<size_t>(b.size(), static_cast<size_t>(o.gold_top));
      for (size_t i = 0; i < std::max(na, nb); ++i) {
        const double ai = i < na ? a[i].first : 0.0, bi = i < nb ? b[i] : 0.0;
        kl += std::abs(ai - bi);
        if (i < na) g[a[i].second] += (ai > bi ? 1.0 : ai < bi ? -1.0 : 0.0) * ai;
      }
      // dLS_c,u/dz_t,j = ([u == j] - q_t,j) / n_s.
      const double G = std::accumulate(g.begin(), g.end(), 0.0);
      for (int64_t r : ps)
        for (int64_t j = 0; j < p.vocab; ++j) dz[r * p.vocab + j] += (g[j] - std::exp(logq[r][j]) * G) / ns;
    }
    out.kd += kl;
  }
  const double denom = o.normalizer > 0 ? o.normalizer : std::max(valid, 1);
  const double scale = (o.t_squared ? T * T : 1.0) / denom;
  out.kd *= scale;
  // CE on the labels at T = 1, mean over the valid labels.
  std::vector<double> dce(dz.size(), 0.0);
  const bool uses_ce = o.dynamic || o.kd_ratio != 1.0;
  if (uses_ce) {
    const auto logq1 = student_logq(p, 1.0);
    int n = 0;
    for (int64_t r = 0; r < p.rows; ++r)
      if (p.labels[r] != -100) ++n;
    for (int64_t r = 0; r < p.rows; ++r) {
      if (p.labels[r] == -100) continue;
      out.ce -= logq1[r][p.labels[r]] / n;
      for (int64_t j = 0; j < p.vocab; ++j)
        dce[r * p.vocab + j] = (std::exp(logq1[r][j]) - (j == p.labels[r] ? 1.0 : 0.0)) / n;
    }
  }
  double kd_w = 1.0, ce_w = 0.0;
  if (o.dynamic) {
    kd_w = out.kd != 0 ? std::abs(out.ce) / std::abs(out.kd) : 0.0;
    ce_w = 1.0;
  } else if (uses_ce) {
    kd_w = o.kd_ratio;
    ce_w = 1.0 - o.kd_ratio;
  }
  out.loss = kd_w * out.kd + ce_w * out.ce;
  out.grad.resize(dz.size());
  for (size_t i = 0; i < dz.size(); ++i) out.grad[i] = kd_w * scale * dz[i] / T + ce_w * dce[i];
  return out;
}

}  // namespace retort::chunk_testing
