#include "losses/chunk_gold.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/autograd/engine.h"
#include "core/util/error.h"
#include "losses/kernels/chunk_distillation_kernels.h"
#include "losses/kernels/chunk_gold_kernels.h"
#include "losses/vocab_parallel.h"

namespace retort::losses {

namespace {

namespace g = kernels::gold;
namespace vp = vocab_parallel;
using chunk_index::ChunkIndex;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct CommonPairs {
  std::vector<int32_t> student, teacher;
  std::vector<int32_t> pair_of_teacher;  // [V_t]: the pair of each teacher id, or -1
};

CommonPairs check_common(const CommonIds& common, int64_t student_vocab, int64_t teacher_vocab, std::string_view op) {
  RETORT_INPUT_CHECK(common.student_ids.defined() && common.teacher_ids.defined() &&
                         common.student_ids.dtype() == DType::I32 && common.teacher_ids.dtype() == DType::I32 &&
                         common.student_ids.numel() == common.teacher_ids.numel(),
                     "{}: the gold loss needs the common id pairs: CommonIds with two i32 tensors of one length "
                     "(student ids, teacher ids), got {} and {}",
                     op, common.student_ids.defined() ? common.student_ids.describe() : "(undefined)",
                     common.teacher_ids.defined() ? common.teacher_ids.describe() : "(undefined)");
  CommonPairs p{common.student_ids.to(Device::cpu()).to_ints(), common.teacher_ids.to(Device::cpu()).to_ints(), {}};
  std::vector<uint8_t> seen_s(static_cast<size_t>(student_vocab), 0), seen_t(static_cast<size_t>(teacher_vocab), 0);
  for (size_t i = 0; i < p.student.size(); ++i) {
    const int32_t u = p.student[i], v = p.teacher[i];
    RETORT_INPUT_CHECK(u >= 0 && u < student_vocab && v >= 0 && v < teacher_vocab,
                       "{}: common pair {} ({}, {}) is outside the vocabularies (student {}, teacher {})", op, i, u, v,
                       student_vocab, teacher_vocab);
    RETORT_INPUT_CHECK(!seen_s[static_cast<size_t>(u)] && !seen_t[static_cast<size_t>(v)],
                       "{}: common pair {} ({}, {}) repeats a student or a teacher id: the common pairs map ids one to "
                       "one",
                       op, i, u, v);
    seen_s[static_cast<size_t>(u)] = seen_t[static_cast<size_t>(v)] = 1;
  }
  p.pair_of_teacher.assign(static_cast<size_t>(teacher_vocab), -1);
  for (size_t i = 0; i < p.teacher.size(); ++i)
    p.pair_of_teacher[static_cast<size_t>(p.teacher[i])] = static_cast<int32_t>(i);
  return p;
}

// The common pairs are built once per tokenizer pair and passed to every step: the last ones seen (per thread, as
// thread ranks each run their own calls) are kept checked, with handles on their tensors so they cannot be freed
// and replaced at the same address. Checking and downloading them again every step cost milliseconds. Their tensors
// must not be changed in place.
const CommonPairs& cached_common(const CommonIds& common, int64_t student_vocab, int64_t teacher_vocab,
                                 std::string_view op) {
  struct Entry {
    Tensor student_ids, teacher_ids;
    int64_t student_vocab = 0, teacher_vocab = 0;
    CommonPairs value;
  };
  thread_local Entry cache;
  const bool hit = cache.student_ids.defined() && common.student_ids.defined() && common.teacher_ids.defined() &&
                   cache.student_ids.impl() == common.student_ids.impl() &&
                   cache.teacher_ids.impl() == common.teacher_ids.impl() && cache.student_vocab == student_vocab &&
                   cache.teacher_vocab == teacher_vocab;
  if (!hit) {
    cache.value = check_common(common, student_vocab, teacher_vocab, op);  // throws on bad input before caching
    cache.student_ids = common.student_ids;
    cache.teacher_ids = common.teacher_ids;
    cache.student_vocab = student_vocab;
    cache.teacher_vocab = teacher_vocab;
  }
  return cache.value;
}

// The teacher's uncommon probabilities of chunk c, sorted decreasing, in compact form: the listed ones (ids of S_c
// that are not common) and `fill` repeated `fill_count` times (every other uncommon id, at the unlisted value).
struct TeacherSorted {
  std::vector<double> listed;  // decreasing
  double fill = 0;
  int64_t fill_count = 0;
  int64_t above = 0;  // listed values > fill, which come first
  double at(int64_t i) const {
    if (i < above) return listed[static_cast<size_t>(i)];
    if (i < above + fill_count) return fill;
    return listed[static_cast<size_t>(i - fill_count)];
  }
};

struct GoldSaved {
  g::GoldPlan plan;
  Tensor lse;
  std::vector<int32_t> winner_offsets, winner_column;
  std::vector<double> winner_grad, chunk_g;
  double factor = 1.0;
  vp::VocabShard shard;
};

#ifdef RETORT_WITH_CUDA
// The GPU path: the plan uploaded, the passes of kernels/cuda/chunk_gold.cu around the same collectives (the
// candidates all-gathered on the device), the merge on the device too. Nothing waits for the host after the upload.
Tensor gold_loss_cuda(const Tensor& student_in, const g::GoldPlan& plan, const std::vector<double>& common_g,
                      const std::vector<TeacherSorted>& teacher_sorted, int64_t n_a, int64_t n_b, double factor,
                      const std::shared_ptr<Communicator>& group, const vp::VocabShard& shard) {
  constexpr const char* kOp = "chunk_distillation_loss (gold)";
  using chunk_index::upload_ints;
  using chunk_index::upload_reals;
  RETORT_INPUT_CHECK(plan.top <= g::cuda::kMaxTop,
                     "{}: gold_uncommon_top = {} is above the CUDA kernels' limit {} (a chunk's top m is sorted in "
                     "shared memory)",
                     kOp, plan.top, g::cuda::kMaxTop);
  RETORT_INPUT_CHECK(shard.total < (int64_t{1} << 24),
                     "{}: a student vocabulary of {} ids; the CUDA candidates carry ids as float32, exact below 2^24",
                     kOp, shard.total);
  const Device device = student_in.device();
  const DType f32 = DType::F32;
  g::cuda::GoldDevicePlan d;
  d.chunks = plan.chunks;
  d.rows = plan.rows;
  d.vocab_start = plan.vocab_start;
  d.top = plan.top;
  const int64_t local_common = std::count(plan.common.begin(), plan.common.end(), uint8_t{1});
  d.local_top = std::min(plan.top, shard.valid - local_common);
  d.n_student = n_a;
  d.n_teacher = n_b;
  d.inv_temperature = static_cast<float>(plan.inv_temperature);
  d.row_chunk = upload_ints(plan.row_chunk, device);
  d.chunk_rows = upload_ints(plan.chunk_rows, device);
  d.rows_list = upload_ints(plan.rows_list, device);
  d.chunk_scale = upload_reals(plan.chunk_scale, f32, device);
  d.common = upload_ints(std::vector<int32_t>(plan.common.begin(), plan.common.end()), device);
  d.unlisted = upload_reals(plan.unlisted, f32, device);
  d.special_offsets = upload_ints(plan.special_offsets, device);
  d.special_column = upload_ints(plan.special_column, device);
  d.special_teacher = upload_reals(plan.special_teacher, f32, device);
  std::vector<int32_t> listed_offsets{0}, above, fill_count;
  std::vector<double> listed, fill;
  for (const TeacherSorted& b : teacher_sorted) {
    listed.insert(listed.end(), b.listed.begin(), b.listed.end());
    listed_offsets.push_back(static_cast<int32_t>(listed.size()));
    above.push_back(static_cast<int32_t>(b.above));
    fill.push_back(b.fill);
    fill_count.push_back(static_cast<int32_t>(b.fill_count));
  }
  d.listed_offsets = upload_ints(std::move(listed_offsets), device);
  d.listed = upload_reals(std::move(listed), f32, device);
  d.above = upload_ints(std::move(above), device);
  d.fill = upload_reals(std::move(fill), f32, device);
  d.fill_count = upload_ints(std::move(fill_count), device);
  d.common_g = upload_reals(common_g, f32, device);

  const Tensor student = vp::real_columns(student_in.view({-1, shard.width}), shard);
  const int64_t rows = student.size(0), chunks = std::max<int64_t>(plan.chunks, 1), m = plan.top;
  Tensor local_max = Tensor::empty({rows}, f32, device), partial_sum = Tensor::empty({rows}, f32, device);
  g::cuda::row_stats(student, d, local_max, partial_sum);
  const Tensor global_max =
      vp::reduce_partials(group, rows, local_max, partial_sum, shard, kOp,
                          [&](const Tensor& global) { g::cuda::rescale_sums(local_max, global, partial_sum); });
  Tensor lse = Tensor::empty({rows}, f32, device);
  g::cuda::finish_lse(global_max, partial_sum, lse);
  Tensor candidates = Tensor::empty({chunks, g::candidate_columns(m)}, f32, device);
  {
    Tensor ls_buffer = Tensor::empty({chunks, shard.valid}, f32, device);
    g::cuda::chunk_pass(student, d, lse, ls_buffer, candidates);
  }
  const Tensor gathered = group ? group->all_gather(candidates.view({-1}), 0) : candidates.view({-1});
  Tensor winner_column = Tensor::empty({chunks, m}, DType::I32, device);
  Tensor winner_grad = Tensor::empty({chunks, m}, f32, device);
  Tensor chunk_g = Tensor::empty({chunks}, f32, device), chunk_loss = Tensor::zeros({plan.chunks}, f32, device);
  g::cuda::merge(gathered, group ? group->size() : 1, d, shard.valid, winner_column, winner_grad, chunk_g, chunk_loss);
  Tensor loss = Tensor::empty({}, f32, device);
  kernels::chunk::cuda::reduce_loss(chunk_loss, factor, loss);
  return autograd::record(
      loss, "vocab_parallel_chunk_gold_loss", {student_in},
      [student_in, d = std::move(d), lse, winner_column, winner_grad, chunk_g, factor, shard](const Tensor& go) {
        const Device dev = student_in.device();
        const Tensor x_real = vp::real_columns(student_in.view({-1, shard.width}), shard);
        Tensor grad = Tensor::empty(student_in.shape(), student_in.dtype(), dev);
        Tensor grad_rows = grad.view({-1, shard.width});
        const Tensor g_out = vp::scalar_grad_output(go, DType::F32, dev, "chunk_distillation_loss (gold)");
        vp::backward_on_real_columns(grad_rows, shard, false, [&](Tensor& real, bool add) {
          g::cuda::backward(x_real, d, lse, winner_column, winner_grad, chunk_g, g_out, factor, add, real);
        });
        return std::vector<Tensor>{grad};
      });
}
#endif

}  // namespace

int64_t gold_teacher_vocab(const VocabProjection& projection, const CommonIds&, std::string_view op) {
  RETORT_INPUT_CHECK(projection.teacher_vocab > 0,
                     "{}: the gold loss reads the teacher vocabulary from projection.teacher_vocab, which is {}; set "
                     "it (the projection's rows are not needed)",
                     op, projection.teacher_vocab);
  return projection.teacher_vocab;
}

Tensor gold_loss(const Tensor& student_in, const ChunkIndex& x, const CommonIds& common,
                 const ChunkDistillationOptions& o, const std::shared_ptr<Communicator>& group,
                 const tp::VocabShard& shard, double denominator) {
  constexpr const char* kOp = "chunk_distillation_loss (gold)";
  RETORT_INPUT_CHECK(o.gold_uncommon_top >= 1, "{}: gold_uncommon_top must be at least 1, got {}", kOp,
                     o.gold_uncommon_top);
  const int64_t vt = x.teacher_vocab, vs = shard.total;
  const CommonPairs& pairs = cached_common(common, vs, vt, kOp);
  const int64_t n_pairs = static_cast<int64_t>(pairs.student.size());
  const DType stats = vp::stat_dtype(student_in);
  const Device cpu = Device::cpu();

  GoldSaved s;
  s.shard = shard;
  g::GoldPlan& plan = s.plan;
  plan.chunks = x.chunks;
  plan.rows = x.student_rows;
  plan.vocab_start = shard.start;
  plan.top = o.gold_uncommon_top;
  plan.inv_temperature = 1.0 / o.temperature;
  plan.row_chunk = x.row_chunk;
  plan.chunk_rows = x.chunk_rows;
  plan.rows_list = x.rows;
  plan.unlisted = x.teacher_unlisted;
  for (int64_t c = 0; c < x.chunks; ++c)
    plan.chunk_scale.push_back(1.0 / static_cast<double>(x.chunk_rows[c + 1] - x.chunk_rows[c]));
  plan.common.assign(static_cast<size_t>(shard.valid), 0);
  const std::vector<int32_t>& pair_of_teacher = pairs.pair_of_teacher;
  for (int64_t i = 0; i < n_pairs; ++i) {
    const int64_t local = pairs.student[i] - shard.start;
    if (local >= 0 && local < shard.valid) plan.common[static_cast<size_t>(local)] = 1;
  }
  // Per chunk: the common pairs whose teacher id is in S_c (this rank's as specials), the common part of G_c, and
  // the teacher's sorted uncommon probabilities.
  std::vector<double> chunk_g(static_cast<size_t>(x.chunks), 0.0);
  std::vector<TeacherSorted> teacher_sorted(static_cast<size_t>(x.chunks));
  plan.special_offsets.push_back(0);
  constexpr int32_t kPairAhead = 16;
  const auto slot_total = static_cast<int32_t>(x.slot_ids.size());
  std::vector<std::pair<int32_t, double>> specials;
  for (int64_t c = 0; c < x.chunks; ++c) {
    specials.clear();
    int64_t in_set = 0;
    double g_common = 0;
    TeacherSorted& b = teacher_sorted[static_cast<size_t>(c)];
    for (int32_t slot = x.chunk_slots[c]; slot < x.chunk_slots[c + 1]; ++slot) {
      // pair_of_teacher is read at random over V_t: fetched kPairAhead slots early.
      if (slot + kPairAhead < slot_total)
        __builtin_prefetch(pair_of_teacher.data() + x.slot_ids[static_cast<size_t>(slot + kPairAhead)]);
      const int32_t v = x.slot_ids[static_cast<size_t>(slot)];
      const double r = x.teacher_log[static_cast<size_t>(slot)];
      const int32_t pair = pair_of_teacher[static_cast<size_t>(v)];
      if (pair < 0) {
        b.listed.push_back(std::exp(r));
        continue;
      }
      ++in_set;
      if (r != kNegInf) g_common -= std::exp(r);
      const int64_t local = pairs.student[static_cast<size_t>(pair)] - shard.start;
      if (local >= 0 && local < shard.valid) specials.push_back({static_cast<int32_t>(local), r});
    }
    const double u = x.teacher_unlisted[static_cast<size_t>(c)];
    if (u != kNegInf) g_common -= std::exp(u) * static_cast<double>(n_pairs - in_set);
    chunk_g[static_cast<size_t>(c)] = g_common;
    std::sort(specials.begin(), specials.end());
    for (const auto& [col, r] : specials) {
      plan.special_column.push_back(col);
      plan.special_teacher.push_back(r);
    }
    plan.special_offsets.push_back(static_cast<int32_t>(plan.special_column.size()));
    std::sort(b.listed.begin(), b.listed.end(), std::greater<>());
    b.fill = std::exp(u);
    b.fill_count = (vt - n_pairs) - static_cast<int64_t>(b.listed.size());
    b.above = std::count_if(b.listed.begin(), b.listed.end(), [&](double v) { return v > b.fill; });
  }

  const int64_t m = plan.top;
  const int64_t n_a = std::min(m, vs - n_pairs), n_b = std::min(m, vt - n_pairs);
  s.factor = (o.scale_by_t_squared ? o.temperature * o.temperature : 1.0) / denominator;
#ifdef RETORT_WITH_CUDA
  if (student_in.device().is_cuda())
    return gold_loss_cuda(student_in, plan, chunk_g, teacher_sorted, n_a, n_b, s.factor, group, shard);
#endif

  // Global row statistics: MAX then SUM all-reduce, as every vocab-parallel loss.
  const Tensor student = vp::real_columns(student_in.view({-1, shard.width}), shard);
  const int64_t rows = student.size(0);
  Tensor local_max = Tensor::empty({rows}, stats, cpu), partial_sum = Tensor::empty({rows}, stats, cpu);
  g::cpu::row_stats(student, plan, local_max, partial_sum);
  const Tensor global_max =
      vp::reduce_partials(group, rows, local_max, partial_sum, shard, kOp, [&](const Tensor& global) {
        const std::vector<double> lm = local_max.to_doubles(), gm = global.to_doubles();
        std::vector<double> sum = partial_sum.to_doubles();
        for (size_t r = 0; r < sum.size(); ++r) sum[r] *= lm[r] == kNegInf ? 0.0 : std::exp(lm[r] - gm[r]);
        partial_sum.copy_(Tensor::from_doubles(sum, {rows}, stats, cpu));
      });
  {
    const std::vector<double> gm = global_max.to_doubles(), sum = partial_sum.to_doubles();
    std::vector<double> lse(static_cast<size_t>(rows));
    for (size_t r = 0; r < lse.size(); ++r) lse[r] = gm[r] + std::log(sum[r]);
    s.lse = Tensor::from_doubles(lse, {rows}, stats, cpu);
  }

  // Each rank's candidates, gathered; the merge runs alike on every rank.
  const int64_t width = g::candidate_columns(m);
  Tensor candidates = Tensor::empty({std::max<int64_t>(x.chunks, 1), width}, stats, cpu);
  g::cpu::chunk_pass(student, plan, s.lse, candidates);
  const Tensor gathered = group ? group->all_gather(candidates.view({-1}), 0) : candidates.view({-1});
  const std::vector<double> all = gathered.to_doubles();
  const int64_t ranks = group ? group->size() : 1, block = std::max<int64_t>(x.chunks, 1) * width;
  double total = 0;
  s.winner_offsets.push_back(0);
  std::vector<std::pair<double, int64_t>> merged;
  for (int64_t c = 0; c < x.chunks; ++c) {
    merged.clear();
    double common_kl = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      const double* row = all.data() + r * block + c * width;
      for (int64_t i = 0; i < m && row[m + i] >= 0; ++i) merged.push_back({row[i], static_cast<int64_t>(row[m + i])});
      common_kl += row[2 * m];
    }
    std::sort(merged.begin(), merged.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    const TeacherSorted& b = teacher_sorted[static_cast<size_t>(c)];
    double l1 = 0;
    for (int64_t i = 0; i < std::max(n_a, n_b); ++i) {
      const double ai = i < n_a ? merged[static_cast<size_t>(i)].first : 0.0, bi = i < n_b ? b.at(i) : 0.0;
      l1 += std::abs(ai - bi);
      if (i >= n_a) continue;
      const double gi = (ai > bi ? 1.0 : ai < bi ? -1.0 : 0.0) * ai;
      chunk_g[static_cast<size_t>(c)] += gi;
      const int64_t local = merged[static_cast<size_t>(i)].second - shard.start;
      if (local >= 0 && local < shard.valid) {
        s.winner_column.push_back(static_cast<int32_t>(local));
        s.winner_grad.push_back(gi);
      }
    }
    s.winner_offsets.push_back(static_cast<int32_t>(s.winner_column.size()));
    total += common_kl + l1;
  }
  s.chunk_g = std::move(chunk_g);
  const Tensor loss = Tensor::full({}, total * s.factor, stats, cpu);
  return autograd::record(loss, "vocab_parallel_chunk_gold_loss", {student_in},
                          [student_in, saved = std::move(s)](const Tensor& go) {
                            const int64_t w = saved.shard.width;
                            const Tensor x_real = vp::real_columns(student_in.view({-1, w}), saved.shard);
                            Tensor grad = Tensor::empty(student_in.shape(), student_in.dtype(), student_in.device());
                            Tensor grad_rows = grad.view({-1, w});
                            const double scale = go.defined() ? go.item() : 1.0;
                            vp::backward_on_real_columns(grad_rows, saved.shard, false, [&](Tensor& real, bool add) {
                              g::cpu::backward(x_real, saved.plan, saved.lse, saved.winner_offsets, saved.winner_column,
                                               saved.winner_grad, saved.chunk_g, scale, saved.factor, add, real);
                            });
                            return std::vector<Tensor>{grad};
                          });
}

}  // namespace retort::losses
