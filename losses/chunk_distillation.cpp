#include "losses/chunk_distillation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "core/autograd/engine.h"
#include "core/util/error.h"
#include "losses/chunk_gold.h"
#include "losses/chunk_index.h"
#include "losses/kernels/chunk_distillation_kernels.h"
#include "losses/vocab_parallel.h"

namespace retort::losses {

namespace {

namespace k = kernels::chunk;
namespace vp = vocab_parallel;
using chunk_index::ChunkIndex;
using chunk_index::HostProjection;

constexpr const char* kOp = "chunk_distillation_loss";

#define RETORT_CHUNK_DISPATCH(device, fn, ...) RETORT_VOCAB_DISPATCH(k, device, fn, __VA_ARGS__)

// What the KL plan needs of the projection over this rank's shard: its rows on the host, their sums (uploaded), and
// the transpose of the shard's rows (teacher id -> the local student columns mapping into it, with their weights and
// their whole rows), packed for the plan's walk.
//
// Why packed: the plan visits, for every slot of every chunk, the student columns mapping into its teacher id and
// each such column's whole projection row. Read through the plain CSR arrays and per-teacher-id stamp tables, that is
// about ten dependent cache misses per slot over arrays of several MB (V_s and V_t entries each): 20-30 ms per call
// at 4096 positions, 2,000 chunks and V ~ 150k, ten times the GPU passes. Here a teacher id's record is one
// contiguous run (a line or two: each column's header, then its row), found through one offset, and prefetched a
// few slots ahead; membership in S_c is a binary search over the chunk's few dozen sorted slot ids (in L1), not a
// V_t-sized stamp table. Built once per projection and shard (cached below).
struct RecordItem {
  int32_t id = 0;     // header: the local column u; row item: a teacher id of u's row
  int32_t count = 0;  // header: the number of row items that follow it
  double weight = 0;  // header: W_u,v; row item: that teacher id's weight
};
struct ShardProjection {
  HostProjection w;
  std::vector<int32_t> record_offsets;  // [V_t + 1] into records
  std::vector<RecordItem> records;      // per teacher id: (header, row items) per column mapping into it, increasing
  std::vector<double> column_weight;
  Tensor column_weight_device;  // stat dtype, on the student's device
};

ShardProjection shard_projection(const VocabProjection& projection, const vp::VocabShard& shard, DType stats,
                                 Device device) {
  ShardProjection sp;
  sp.w = chunk_index::host_projection(projection, shard.total, kOp);
  const HostProjection& w = sp.w;
  const int64_t vt = projection.teacher_vocab, valid = shard.valid, start = shard.start;
  auto row_length = [&](int64_t u) {
    return w.row_offsets[static_cast<size_t>(start + u) + 1] - w.row_offsets[static_cast<size_t>(start + u)];
  };
  // Sizes first (each entry of column u takes 1 + |row u| items in its teacher id's record), then the fill.
  sp.record_offsets.assign(static_cast<size_t>(vt) + 1, 0);
  for (int64_t u = 0; u < valid; ++u)
    for (int32_t e = w.row_offsets[static_cast<size_t>(start + u)];
         e < w.row_offsets[static_cast<size_t>(start + u) + 1]; ++e)
      sp.record_offsets[static_cast<size_t>(w.teacher_ids[static_cast<size_t>(e)]) + 1] += 1 + row_length(u);
  for (int64_t v = 0; v < vt; ++v)
    sp.record_offsets[static_cast<size_t>(v) + 1] += sp.record_offsets[static_cast<size_t>(v)];
  sp.records.resize(static_cast<size_t>(sp.record_offsets.back()));
  sp.column_weight.assign(static_cast<size_t>(valid), 0.0);
  std::vector<int32_t> fill(sp.record_offsets.begin(), sp.record_offsets.end() - 1);
  for (int64_t u = 0; u < valid; ++u) {
    const int32_t r0 = w.row_offsets[static_cast<size_t>(start + u)],
                  r1 = w.row_offsets[static_cast<size_t>(start + u) + 1];
    for (int32_t e = r0; e < r1; ++e) {
      int32_t& at = fill[static_cast<size_t>(w.teacher_ids[static_cast<size_t>(e)])];
      sp.records[static_cast<size_t>(at++)] = {static_cast<int32_t>(u), r1 - r0, w.weights[static_cast<size_t>(e)]};
      for (int32_t f = r0; f < r1; ++f)
        sp.records[static_cast<size_t>(at++)] = {w.teacher_ids[static_cast<size_t>(f)], 0,
                                                 w.weights[static_cast<size_t>(f)]};
      sp.column_weight[static_cast<size_t>(u)] += w.weights[static_cast<size_t>(e)];
    }
  }
  sp.column_weight_device = chunk_index::upload_reals(sp.column_weight, stats, device);
  return sp;
}

// A projection is built once per tokenizer pair and passed to every step: the last one seen (per thread, as thread
// ranks each hold their own shard) is kept with handles on its tensors, so it cannot be freed and replaced at the
// same address. Its tensors must not be changed in place.
const ShardProjection& cached_shard_projection(const VocabProjection& projection, const vp::VocabShard& shard,
                                               DType stats, Device device) {
  struct Entry {
    Tensor row_offsets, teacher_ids, weights;
    int64_t student_vocab = 0, teacher_vocab = 0, start = 0, valid = 0, total = 0;
    DType stats = DType::F32;
    Device device;
    ShardProjection value;
  };
  thread_local Entry cache;
  const bool hit = cache.row_offsets.defined() && projection.row_offsets.defined() &&
                   cache.row_offsets.impl() == projection.row_offsets.impl() &&
                   cache.teacher_ids.impl() == projection.teacher_ids.impl() &&
                   cache.weights.impl() == projection.weights.impl() &&
                   cache.student_vocab == projection.student_vocab && cache.teacher_vocab == projection.teacher_vocab &&
                   cache.start == shard.start && cache.valid == shard.valid && cache.total == shard.total &&
                   cache.stats == stats && cache.device == device;
  if (!hit) {
    cache.value = shard_projection(projection, shard, stats, device);  // throws on bad input before caching it
    cache.row_offsets = projection.row_offsets;
    cache.teacher_ids = projection.teacher_ids;
    cache.weights = projection.weights;
    cache.student_vocab = projection.student_vocab;
    cache.teacher_vocab = projection.teacher_vocab;
    cache.start = shard.start;
    cache.valid = shard.valid;
    cache.total = shard.total;
    cache.stats = stats;
    cache.device = device;
  }
  return cache.value;
}

// The host lists of a KL plan, before their upload.
struct PlanLists {
  std::vector<int32_t> slot_entries, entry_column, chunk_pre, pre_column, pre_entries, pre_slot, row_offset;
  std::vector<double> entry_weight, pre_outside, pre_weight, scale;
  // The columns reached from a chunk's slots, each with its header's index in the records: column << 32 | index.
  std::vector<uint64_t> reached;
  // Empty, and a part of a plan: its offsets count from 0 with no leading 0.
  void clear_part() {
    for (auto* v : {&slot_entries, &entry_column, &chunk_pre, &pre_column, &pre_entries, &pre_slot, &row_offset})
      v->clear();
    for (auto* v : {&entry_weight, &pre_outside, &pre_weight, &scale}) v->clear();
    reached.clear();
  }
  // Empty, and the start of a whole plan: every offset list begins with its 0.
  void clear() {
    clear_part();
    slot_entries.push_back(0);
    chunk_pre.push_back(0);
    pre_entries.push_back(0);
  }
};

// The index of `id` in the sorted ids[0, n), or -1: a branch-free binary search (the ids looked up are random, so a
// branching search mispredicts at nearly every step).
int32_t find_sorted(const int32_t* ids, int32_t n, int32_t id) {
  if (n == 0) return -1;
  const int32_t* base = ids;
  while (n > 1) {
    const int32_t half = n / 2;
    base = base[half] <= id ? base + half : base;
    n -= half;
  }
  return *base == id ? static_cast<int32_t>(base - ids) : -1;
}

// Plans chunks [c0, c1) into `out`, appending; its offsets (slot_entries, chunk_pre, pre_entries) count from out's
// current list sizes, its slots are global.
void plan_chunks(const ChunkIndex& x, const ShardProjection& sp, size_t c0, size_t c1, PlanLists& out,
                 int64_t& max_preimage) {
  auto& [slot_entries, entry_column, chunk_pre, pre_column, pre_entries, pre_slot, row_offset, entry_weight,
         pre_outside, pre_weight, scale, reached] = out;
  const int32_t* offsets = sp.record_offsets.data();
  const RecordItem* records = sp.records.data();
  const int32_t* slot_ids = x.slot_ids.data();
  const int32_t slot_end = x.chunk_slots[c1];
  // Prefetch distances in slots: the record offset of the slot kPrefetchOffset ahead, the record itself of the
  // slot kPrefetchRecord ahead (its offset is in cache by then).
  constexpr int32_t kPrefetchOffset = 16, kPrefetchRecord = 8;
  for (size_t c = c0; c < c1; ++c) {
    const int32_t g0 = x.chunk_slots[c], g1 = x.chunk_slots[c + 1];
    const int32_t* set_begin = slot_ids + g0;
    reached.clear();
    for (int32_t g = g0; g < g1; ++g) {
      if (g + kPrefetchOffset < slot_end) __builtin_prefetch(offsets + slot_ids[g + kPrefetchOffset]);
      if (g + kPrefetchRecord < slot_end) {
        const RecordItem* ahead = records + offsets[slot_ids[g + kPrefetchRecord]];
        __builtin_prefetch(ahead);
        __builtin_prefetch(ahead + 4);
      }
      const int32_t v = slot_ids[g];
      for (int32_t i = offsets[v]; i < offsets[v + 1]; i += 1 + records[i].count) {
        entry_column.push_back(records[i].id);
        entry_weight.push_back(records[i].weight);
        reached.push_back(static_cast<uint64_t>(records[i].id) << 32 | static_cast<uint32_t>(i));
      }
      slot_entries.push_back(static_cast<int32_t>(entry_column.size()));
    }
    // The preimage: the distinct columns reached, increasing. Each column's row split into its weights onto S_c
    // (by slot) and the exact sum of the others, in row order.
    std::sort(reached.begin(), reached.end());
    const size_t pre_first = pre_column.size();
    for (size_t i = 0; i < reached.size(); ++i) {
      const int32_t column = static_cast<int32_t>(reached[i] >> 32);
      if (i > 0 && static_cast<int32_t>(reached[i - 1] >> 32) == column) continue;
      pre_column.push_back(column);
      const RecordItem* header = records + static_cast<uint32_t>(reached[i]);
      double outside = 0;
      for (int32_t j = 1; j <= header->count; ++j) {
        const RecordItem& item = header[j];
        const int32_t at = find_sorted(set_begin, g1 - g0, item.id);
        if (at >= 0) {
          pre_slot.push_back(g0 + at);
          pre_weight.push_back(item.weight);
        } else {
          outside += item.weight;
        }
      }
      pre_outside.push_back(outside);
      pre_entries.push_back(static_cast<int32_t>(pre_slot.size()));
    }
    chunk_pre.push_back(static_cast<int32_t>(pre_column.size()));
    max_preimage = std::max<int64_t>(max_preimage, static_cast<int64_t>(pre_column.size() - pre_first));
  }
}

// Worker threads of a plan: at most kMaxPlanThreads, each with at least kSlotsPerPlanThread slots.
constexpr int64_t kMaxPlanThreads = 8, kSlotsPerPlanThread = 4096;

// The KL plan of this rank's shard (chunk_distillation_kernels.h): for every S_c column, the local student ids that
// map into it (through the projection's transpose), and the chunk's preimage columns with their weight outside S_c.
k::ChunkPlan build_plan(const ChunkIndex& x, const ShardProjection& sp, const vp::VocabShard& shard, DType stats,
                        Device device) {
  using chunk_index::upload_ints;
  using chunk_index::upload_reals;
  const size_t nc = static_cast<size_t>(x.chunks);
  // The plan's host lists, kept per thread from call to call: fresh multi-MB vectors every step would spend
  // milliseconds in page faults alone.
  thread_local PlanLists lists;
  lists.clear();
  auto& [slot_entries, entry_column, chunk_pre, pre_column, pre_entries, pre_slot, row_offset, entry_weight,
         pre_outside, pre_weight, scale, reached] = lists;
  int64_t max_preimage = 0;
  // Chunks are independent: above a few thousand slots, ranges of them are planned on worker threads (each into
  // its own lists, kept from call to call like the main ones) and appended in chunk order, offsets shifted. The
  // walk is bound by memory latency, so threads overlap the misses. The result is the same as one thread's.
  const int64_t slots = static_cast<int64_t>(x.slot_ids.size());
  const int workers =
      static_cast<int>(std::min<int64_t>({static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())),
                                          kMaxPlanThreads, slots / kSlotsPerPlanThread, static_cast<int64_t>(nc)}));
  if (workers <= 1) {
    plan_chunks(x, sp, 0, nc, lists, max_preimage);
  } else {
    thread_local std::vector<PlanLists> kept_parts;
    kept_parts.resize(static_cast<size_t>(workers));
    std::vector<PlanLists>& parts = kept_parts;  // this thread's: a worker naming kept_parts would get its own
    std::vector<int64_t> part_max(static_cast<size_t>(workers), 0);
    {
      std::vector<std::jthread> threads;
      for (int t = 0; t < workers; ++t) {
        const size_t c0 = nc * static_cast<size_t>(t) / static_cast<size_t>(workers);
        const size_t c1 = nc * static_cast<size_t>(t + 1) / static_cast<size_t>(workers);
        threads.emplace_back([&, t, c0, c1] {
          parts[static_cast<size_t>(t)].clear_part();
          plan_chunks(x, sp, c0, c1, parts[static_cast<size_t>(t)], part_max[static_cast<size_t>(t)]);
        });
      }
    }
    for (int t = 0; t < workers; ++t) {
      const PlanLists& part = parts[static_cast<size_t>(t)];
      const auto entries = static_cast<int32_t>(entry_column.size());
      const auto pre = static_cast<int32_t>(pre_column.size());
      const auto pre_items = static_cast<int32_t>(pre_slot.size());
      for (int32_t v : part.slot_entries) slot_entries.push_back(entries + v);
      for (int32_t v : part.chunk_pre) chunk_pre.push_back(pre + v);
      for (int32_t v : part.pre_entries) pre_entries.push_back(pre_items + v);
      entry_column.insert(entry_column.end(), part.entry_column.begin(), part.entry_column.end());
      entry_weight.insert(entry_weight.end(), part.entry_weight.begin(), part.entry_weight.end());
      pre_column.insert(pre_column.end(), part.pre_column.begin(), part.pre_column.end());
      pre_outside.insert(pre_outside.end(), part.pre_outside.begin(), part.pre_outside.end());
      pre_slot.insert(pre_slot.end(), part.pre_slot.begin(), part.pre_slot.end());
      pre_weight.insert(pre_weight.end(), part.pre_weight.begin(), part.pre_weight.end());
      max_preimage = std::max(max_preimage, part_max[static_cast<size_t>(t)]);
    }
  }
  row_offset.assign(static_cast<size_t>(x.student_rows), 0);
  int64_t columns = 0;
  for (int64_t r = 0; r < x.student_rows; ++r) {
    const int32_t c = x.row_chunk[static_cast<size_t>(r)];
    if (c < 0) continue;
    row_offset[static_cast<size_t>(r)] = static_cast<int32_t>(columns);
    columns += x.chunk_slots[static_cast<size_t>(c) + 1] - x.chunk_slots[static_cast<size_t>(c)];
  }
  RETORT_INPUT_CHECK(2 * x.student_rows + columns < std::numeric_limits<int32_t>::max(),
                     "{}: {} rows with {} chunk columns in all are too many for one call; split the batch", kOp,
                     x.student_rows, columns);
  scale.resize(nc);
  for (size_t c = 0; c < nc; ++c) scale[c] = 1.0 / static_cast<double>(x.chunk_rows[c + 1] - x.chunk_rows[c]);

  k::ChunkPlan p;
  p.chunks = x.chunks;
  p.slots = static_cast<int64_t>(x.slot_ids.size());
  p.rows = x.student_rows;
  p.row_columns = columns;
  p.max_preimage = max_preimage;
  p.row_chunk = upload_ints(x.row_chunk, device);
  p.row_column_offset = upload_ints(row_offset, device);
  p.chunk_rows = upload_ints(x.chunk_rows, device);
  p.chunk_row_list = upload_ints(x.rows, device);
  p.chunk_slots = upload_ints(x.chunk_slots, device);
  p.slot_entries = upload_ints(slot_entries, device);
  p.entry_column = upload_ints(entry_column, device);
  p.entry_weight = upload_reals(entry_weight, stats, device);
  p.chunk_preimage = upload_ints(chunk_pre, device);
  p.preimage_column = upload_ints(pre_column, device);
  p.preimage_outside = upload_reals(pre_outside, stats, device);
  p.preimage_entries = upload_ints(pre_entries, device);
  p.preimage_entry_slot = upload_ints(pre_slot, device);
  p.preimage_entry_weight = upload_reals(pre_weight, stats, device);
  p.column_weight = sp.column_weight_device;
  p.teacher_log = upload_reals(x.teacher_log, stats, device);
  p.teacher_log_rest = upload_reals(x.teacher_rest, stats, device);
  p.chunk_scale = upload_reals(scale, stats, device);
  return p;
}

struct ChunkKLSaved {
  k::ChunkPlan plan;
  k::ChunkParams params;
  Tensor row_stats, preimage_grad, chunk_rest_grad;
  double factor = 1.0;  // T^2 (or 1) over the denominator
  vp::VocabShard shard;
};

// The chunk-averaged KL, recorded as one node on the student.
Tensor chunk_kl_loss(const Tensor& student_in, const ChunkIndex& x, const VocabProjection& projection,
                     const ChunkDistillationOptions& o, const std::shared_ptr<Communicator>& group,
                     const vp::VocabShard& shard, double denominator) {
  const Device device = student_in.device();
  const DType stats = vp::stat_dtype(student_in);
  const ShardProjection& w = cached_shard_projection(projection, shard, stats, device);
  ChunkKLSaved s;
  s.shard = shard;
  s.plan = build_plan(x, w, shard, stats, device);
  s.params.inv_temperature = 1.0 / o.temperature;
  s.params.vocab_start = shard.start;
  s.factor = (o.scale_by_t_squared ? o.temperature * o.temperature : 1.0) / denominator;
  const Tensor student = vp::real_columns(student_in.view({-1, shard.width}), shard);
  const int64_t rows = student.size(0);
  const k::ChunkPlan& plan = s.plan;
  Tensor local_max = Tensor::empty({rows}, stats, device);
  Tensor partials = Tensor::empty({2 * rows + plan.row_columns}, stats, device);
  RETORT_CHUNK_DISPATCH(device, local_stats, student, plan, s.params, local_max, partials);
  const Tensor global_max = vp::reduce_partials(
      group, rows, local_max, partials, shard, kOp,
      [&](const Tensor& global) { RETORT_CHUNK_DISPATCH(device, rescale, plan, local_max, global, partials); });
  s.row_stats = Tensor::zeros({rows, k::kRowStats}, stats, device);
  s.preimage_grad = Tensor::empty({std::max<int64_t>(plan.preimage_column.numel(), 1)}, stats, device);
  s.chunk_rest_grad = Tensor::empty({std::max<int64_t>(plan.chunks, 1)}, stats, device);
  Tensor chunk_kl = Tensor::zeros({plan.chunks}, stats, device);
  Tensor scratch = Tensor::empty({std::max<int64_t>(plan.slots, 1)}, stats, device);
  RETORT_CHUNK_DISPATCH(device, finish, plan, s.params, global_max, partials, s.row_stats, s.preimage_grad,
                        s.chunk_rest_grad, chunk_kl, scratch);
  Tensor loss = Tensor::empty({}, stats, device);
  RETORT_CHUNK_DISPATCH(device, reduce_loss, chunk_kl, s.factor, loss);
  return autograd::record(
      loss, "vocab_parallel_chunk_kl_loss", {student_in}, [student_in, saved = std::move(s)](const Tensor& g) {
        const Device dev = student_in.device();
        const int64_t width = saved.shard.width;
        const Tensor x_real = vp::real_columns(student_in.view({-1, width}), saved.shard);
        Tensor grad = Tensor::empty(student_in.shape(), student_in.dtype(), dev);
        Tensor grad_rows = grad.view({-1, width});
        const Tensor go = vp::scalar_grad_output(g, vp::stat_dtype(student_in), dev, kOp);
        vp::backward_on_real_columns(grad_rows, saved.shard, false, [&](Tensor& real, bool add) {
          RETORT_CHUNK_DISPATCH(dev, backward, x_real, saved.plan, saved.params, saved.row_stats, saved.preimage_grad,
                                saved.chunk_rest_grad, go, saved.factor, add, real);
        });
        return std::vector<Tensor>{grad};
      });
}

// w_kd * kd + w_ce * ce as one node, in the losses' own precision (ops::scale takes a float factor, which would
// round 0.7 to 0.69999999 and show in the f64 reference checks). Both are 0-dim and already read on the host.
Tensor weighted_sum(const Tensor& kd, double kd_value, double w_kd, const Tensor& ce, double ce_value, double w_ce) {
  const Tensor out = Tensor::full({}, w_kd * kd_value + w_ce * ce_value, kd.dtype(), kd.device());
  return autograd::record(out, "chunk_distillation_mix", {kd, ce}, [w_kd, w_ce, kd, ce](const Tensor& g) {
    const double go = g.defined() ? g.item() : 1.0;
    return std::vector<Tensor>{Tensor::full({}, go * w_kd, kd.dtype(), kd.device()),
                               Tensor::full({}, go * w_ce, ce.dtype(), ce.device())};
  });
}

}  // namespace

CommonIds common_ids_from_pairs(const Tensor& pairs) {
  RETORT_INPUT_CHECK(pairs.defined() && pairs.dtype() == DType::I32 && pairs.ndim() == 2 && pairs.size(1) == 2,
                     "common_ids_from_pairs: the pairs {} must be i32 [P, 2] of (student id, teacher id)",
                     pairs.defined() ? pairs.describe() : "(undefined)");
  const std::vector<int32_t> all = pairs.to(Device::cpu()).to_ints();
  std::vector<int32_t> student, teacher;
  for (size_t i = 0; i + 1 < all.size(); i += 2) {
    student.push_back(all[i]);
    teacher.push_back(all[i + 1]);
  }
  const int64_t n = static_cast<int64_t>(student.size());
  return {Tensor::from_ints(student, {n}), Tensor::from_ints(teacher, {n})};
}

int64_t valid_chunk_count(const ChunkAssignment& chunks) {
  RETORT_INPUT_CHECK(chunks.student_chunk.defined() && chunks.teacher_chunk.defined() && chunks.chunk_count >= 0,
                     "valid_chunk_count: the assignment needs both sides' chunk ids and a chunk_count");
  std::vector<uint8_t> seen(static_cast<size_t>(chunks.chunk_count), 0);
  auto mark = [&](const Tensor& ids, uint8_t bit) {
    for (int32_t c : ids.to(Device::cpu()).to_ints()) {
      RETORT_INPUT_CHECK(c >= -1 && c < chunks.chunk_count, "valid_chunk_count: chunk id {} is outside [-1, {})", c,
                         chunks.chunk_count);
      if (c >= 0) seen[static_cast<size_t>(c)] |= bit;
    }
  };
  mark(chunks.student_chunk, 1);
  mark(chunks.teacher_chunk, 2);
  return std::count(seen.begin(), seen.end(), uint8_t{3});
}

ChunkDistillationResult chunk_distillation_loss(const Tensor& student, const Tensor& labels,
                                                const ChunkTeacherTargets& teacher, const ChunkAssignment& chunks,
                                                const VocabProjection& projection,
                                                const ChunkDistillationOptions& options, const CommonIds& common) {
  vp::check_logits(student, kOp, "student logits");
  vp::check_backend(student, kOp, "student logits");
  const ChunkDistillationOptions& o = options;
  RETORT_INPUT_CHECK(std::isfinite(o.temperature) && o.temperature > 0,
                     "{}: the temperature must be a positive number, got {}", kOp, o.temperature);
  RETORT_INPUT_CHECK(std::isfinite(o.kd_ratio) && o.kd_ratio >= 0 && o.kd_ratio <= 1,
                     "{}: kd_ratio must be in [0, 1], got {}", kOp, o.kd_ratio);
  const bool uses_ce = o.dynamic_ce_scaling || o.kd_ratio != 1.0;
  RETORT_INPUT_CHECK(!uses_ce || labels.defined(),
                     "{}: kd_ratio {} {}mixes in the cross-entropy on the student's labels, but no labels were given",
                     kOp, o.kd_ratio, o.dynamic_ce_scaling ? "with dynamic_ce_scaling " : "");
  if (o.normalizer)
    RETORT_INPUT_CHECK(std::isfinite(*o.normalizer) && *o.normalizer > 0, "{}: the normalizer must be positive, got {}",
                       kOp, *o.normalizer);
  const auto group = vp::group_of(student, o.group, kOp);
  const vp::VocabShard shard = vp::vocab_shard(student, group, kOp);
  const int64_t rows = student.numel() / shard.width;
  const int64_t teacher_vocab =
      o.kind == ChunkLossKind::kGold ? gold_teacher_vocab(projection, common, kOp) : projection.teacher_vocab;
  const ChunkIndex x = chunk_index::build_chunk_index(rows, teacher, chunks, teacher_vocab, kOp);
  const double denominator = o.normalizer ? *o.normalizer : static_cast<double>(std::max<int64_t>(x.chunks, 1));

  ChunkDistillationResult out;
  Tensor kd = o.kind == ChunkLossKind::kGold ? gold_loss(student, x, common, o, group, shard, denominator)
                                             : chunk_kl_loss(student, x, projection, o, group, shard, denominator);
  out.kd = kd.item();
  if (!uses_ce) {
    out.loss = kd;
    return out;
  }
  CrossEntropyOptions ce_options;
  ce_options.ignore_index = o.ignore_index;
  ce_options.normalizer = o.ce_normalizer;
  ce_options.group = o.group;
  const Tensor ce = cross_entropy(student, labels, ce_options);
  out.ce = ce.item();
  if (o.dynamic_ce_scaling) {
    // sg(|CE| / |KD|): a number, so no gradient flows through the ratio. A KD of exactly 0 has nothing to scale.
    const double ratio = out.kd != 0 ? std::abs(out.ce) / std::abs(out.kd) : 0.0;
    out.loss = weighted_sum(kd, out.kd, ratio, ce, out.ce, 1.0);
  } else {
    out.loss = weighted_sum(kd, out.kd, o.kd_ratio, ce, out.ce, 1.0 - o.kd_ratio);
  }
  return out;
}

}  // namespace retort::losses
