#include "distill/cache/teacher_sample.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/util/error.h"
#include "distill/cache/topk_cache.h"

namespace retort::distill {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// log sum_j e^{v_j} of one shard's values (-inf for a shard without mass).
double log_sum_exp(const double* v, int64_t n) {
  double m = kNegInf;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, v[j]);
  if (m == kNegInf) return kNegInf;
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(v[j] - m);
  return m + std::log(s);
}

// log sum_r e^{l_r} of the ranks' log-masses.
double combine(const std::vector<double>& logs) {
  return log_sum_exp(logs.data(), static_cast<int64_t>(logs.size()));
}

}  // namespace

double sample_uniform(uint64_t seed, int64_t position, int draw) {
  const uint64_t row = mix64(mix64(seed) ^ static_cast<uint64_t>(position));
  return static_cast<double>(mix64(row + static_cast<uint64_t>(draw)) >> 11) * 0x1.0p-53;
}

VocabSample sample_vocab(const Tensor& logits, std::span<const int64_t> positions, const VocabSampleOptions& o) {
  RETORT_INPUT_CHECK(logits.defined() && logits.ndim() >= 1 && logits.size(-1) > 0,
                     "sample_vocab: logits must be [..., V_local] with V_local > 0, got {}",
                     logits.defined() ? logits.describe() : "an undefined tensor");
  RETORT_INPUT_CHECK(o.draws >= 1 && o.draws <= kMaxSampledDraws, "sample_vocab: K = {} draws must lie in [1, {}]",
                     o.draws, kMaxSampledDraws);
  RETORT_INPUT_CHECK(std::isfinite(o.temperature) && o.temperature > 0 && std::isfinite(o.proposal_temperature) &&
                         o.proposal_temperature > 0,
                     "sample_vocab: the temperatures must be positive numbers, got T = {} and t = {}", o.temperature,
                     o.proposal_temperature);
  const std::shared_ptr<Communicator> group = o.group && o.group->size() > 1 ? o.group : nullptr;
  const int tp = group ? group->size() : 1, rank = group ? group->rank() : 0;
  const int64_t local = logits.size(-1), rows = logits.numel() / local, K = o.draws;
  RETORT_INPUT_CHECK(static_cast<int64_t>(positions.size()) == rows,
                     "sample_vocab: {} stream positions for {} rows of logits {}", positions.size(), rows,
                     logits.describe());
  RETORT_INPUT_CHECK(K <= local * tp, "sample_vocab: K = {} draws need a vocabulary of at least K ids (got {})", K,
                     local * tp);
  const int64_t start = rank * local;
  const double inv_t = 1.0 / o.temperature, inv_proposal = 1.0 / (o.temperature * o.proposal_temperature);
  const bool tempered = o.proposal_temperature != 1.0;
  // The logits as f32 on the host, read in place when they already are (no copy of [rows, V_local]).
  const Tensor on_host = logits.to(Device::cpu());
  const Tensor host_f32 = on_host.dtype() == DType::F32 ? on_host : on_host.to(DType::F32);
  const float* host = host_f32.data<float>();

  // 1. Per row and shard: the log-masses of the teacher at T and of the proposal (the same at t = 1). Rows in
  // parallel: each is one read of its logits.
  std::vector<float> shard_masses(static_cast<size_t>(rows * 2));
#pragma omp parallel
  {
    std::vector<double> scaled(static_cast<size_t>(local)), proposal(static_cast<size_t>(local));
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = host + r * local;
      for (int64_t j = 0; j < local; ++j) {
        scaled[static_cast<size_t>(j)] = static_cast<double>(x[j]) * inv_t;
        if (tempered) proposal[static_cast<size_t>(j)] = static_cast<double>(x[j]) * inv_proposal;
      }
      const double teacher_log = log_sum_exp(scaled.data(), local);
      shard_masses[static_cast<size_t>(2 * r)] = static_cast<float>(teacher_log);
      shard_masses[static_cast<size_t>(2 * r + 1)] =
          static_cast<float>(tempered ? log_sum_exp(proposal.data(), local) : teacher_log);
    }
  }
  std::vector<float> all_masses = shard_masses;  // [tp, rows, 2]
  if (group) {
    const Tensor mine = Tensor::from_floats(shard_masses, {rows, 2}, DType::F32, Device::cpu());
    all_masses = group->all_gather(mine.to(logits.device()), 0).to_floats();
  }
  // A row without a finite logit anywhere has no distribution to sample (checked before the parallel loop, which
  // must not throw).
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> proposal_logs(static_cast<size_t>(tp));
    for (int s = 0; s < tp; ++s)
      proposal_logs[static_cast<size_t>(s)] = all_masses[static_cast<size_t>((s * rows + r) * 2 + 1)];
    RETORT_INPUT_CHECK(std::isfinite(combine(proposal_logs)),
                       "sample_vocab: row {} (stream position {}) has no finite logit (all -inf or NaN): the teacher "
                       "gives no distribution to sample",
                       r, positions[static_cast<size_t>(r)]);
  }

  // 2. Every draw: the shard that holds its uniform (known to every rank), inverted by that shard's rank alone.
  std::vector<int32_t> drawn(static_cast<size_t>(rows * K), 0);
  std::vector<float> drawn_ratio(static_cast<size_t>(rows * K), 0.f);
  std::vector<float> lse(static_cast<size_t>(rows));
#pragma omp parallel
  {
    std::vector<double> cdf(static_cast<size_t>(local));
    std::vector<double> teacher_logs(static_cast<size_t>(tp)), proposal_logs(static_cast<size_t>(tp));
    std::vector<double> bounds(static_cast<size_t>(tp));
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      for (int s = 0; s < tp; ++s) {
        teacher_logs[static_cast<size_t>(s)] = all_masses[static_cast<size_t>((s * rows + r) * 2)];
        proposal_logs[static_cast<size_t>(s)] = all_masses[static_cast<size_t>((s * rows + r) * 2 + 1)];
      }
      const double teacher_lse = combine(teacher_logs), proposal_lse = combine(proposal_logs);
      lse[static_cast<size_t>(r)] = static_cast<float>(teacher_lse);
      // Shard s holds [C_{s-1}, C_s) of [0, 1); the last shard with mass ends at 1 whatever the rounding.
      double cumulative = 0;
      int last_with_mass = 0;
      for (int s = 0; s < tp; ++s) {
        const double mass = std::exp(proposal_logs[static_cast<size_t>(s)] - proposal_lse);
        cumulative += mass;
        bounds[static_cast<size_t>(s)] = cumulative;
        if (mass > 0) last_with_mass = s;
      }
      for (int s = last_with_mass; s < tp; ++s) bounds[static_cast<size_t>(s)] = 1.0;
      // This shard's CDF of e^{proposal_j - lse_s}, in double; built only when one of the row's draws lands here.
      const float* x = host + r * local;
      const double own_log = proposal_logs[static_cast<size_t>(rank)];
      double running = -1;
      for (int64_t d = 0; d < K; ++d) {
        const double u = sample_uniform(o.seed, positions[static_cast<size_t>(r)], static_cast<int>(d));
        const int owner =
            static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), u) - bounds.begin());  // first C_s > u
        if (owner != rank) continue;
        if (running < 0) {
          running = 0;
          for (int64_t j = 0; j < local; ++j) {
            const double v = static_cast<double>(x[j]) * inv_proposal;
            running += own_log == kNegInf || v == kNegInf ? 0.0 : std::exp(v - own_log);
            cdf[static_cast<size_t>(j)] = running;
          }
        }
        const double below = owner == 0 ? 0.0 : bounds[static_cast<size_t>(owner - 1)];
        const double width = bounds[static_cast<size_t>(owner)] - below;
        const double v = std::clamp((u - below) / width, 0.0, std::nextafter(1.0, 0.0));
        // The first column whose CDF passes v x (the shard's own total): a column of zero mass is never chosen.
        const auto at = std::upper_bound(cdf.begin(), cdf.end(), v * running) - cdf.begin();
        const int64_t j = std::min<int64_t>(at, local - 1);
        drawn[static_cast<size_t>(r * K + d)] = static_cast<int32_t>(start + j);
        if (tempered) {
          const double xj = static_cast<double>(x[j]);
          drawn_ratio[static_cast<size_t>(r * K + d)] =
              static_cast<float>((xj * inv_t - teacher_lse) - (xj * inv_proposal - proposal_lse));
        }
      }
    }
  }
  if (group) {  // each draw has exactly one owner: the others add 0
    Tensor ids = Tensor::from_ints(drawn, {rows, K}, logits.device());
    group->all_reduce(ids, ReduceOp::Sum);
    drawn = ids.to_ints();
    if (tempered) {
      Tensor ratios = Tensor::from_floats(drawn_ratio, {rows, K}, DType::F32, logits.device());
      group->all_reduce(ratios, ReduceOp::Sum);
      drawn_ratio = ratios.to_floats();
    }
  }

  // 3. Distinct ids with their counts, then filler ids.
  VocabSample out;
  out.rows = rows;
  out.draws = o.draws;
  out.indices.resize(static_cast<size_t>(rows * K));
  out.counts.assign(static_cast<size_t>(rows * K), 0);
  out.log_ratios.assign(static_cast<size_t>(rows * K), 0.f);
  out.lse = std::move(lse);
  std::vector<std::pair<int32_t, float>> row_draws(static_cast<size_t>(K));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < K; ++d)
      row_draws[static_cast<size_t>(d)] = {drawn[static_cast<size_t>(r * K + d)],
                                           drawn_ratio[static_cast<size_t>(r * K + d)]};
    std::sort(row_draws.begin(), row_draws.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    int32_t* ids = out.indices.data() + r * K;
    uint16_t* counts = out.counts.data() + r * K;
    float* ratios = out.log_ratios.data() + r * K;
    int64_t distinct = 0;
    for (int64_t d = 0; d < K; ++d) {
      const auto [id, ratio] = row_draws[static_cast<size_t>(d)];
      if (distinct > 0 && ids[distinct - 1] == id) {
        ++counts[distinct - 1];
        continue;
      }
      ids[distinct] = id;
      counts[distinct] = 1;
      ratios[distinct] = ratio;
      ++distinct;
    }
    // Fillers: the smallest ids not drawn (the drawn ones are sorted, so one merge finds them).
    int32_t candidate = 0;
    int64_t next_drawn = 0;
    for (int64_t slot = distinct; slot < K; ++slot) {
      while (next_drawn < distinct && ids[next_drawn] <= candidate) {
        if (ids[next_drawn] == candidate) ++candidate;
        ++next_drawn;
      }
      ids[slot] = candidate++;
    }
  }
  return out;
}

}  // namespace retort::distill
