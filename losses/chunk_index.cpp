#include "losses/chunk_index.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "core/util/error.h"
#include "losses/kernels/topk_distillation_row_math.h"

namespace retort::losses::chunk_index {

namespace {

// Worker threads of the index: at most kMaxIndexThreads, each with at least kIdsPerIndexThread teacher ids.
constexpr int64_t kMaxIndexThreads = 8, kIdsPerIndexThread = 8192;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::vector<int32_t> host_ints(const Tensor& t) {
  return t.to(Device::cpu()).to_ints();
}

void check_chunk_ids(const std::vector<int32_t>& ids, int64_t chunk_count, std::string_view op, const char* side) {
  for (size_t i = 0; i < ids.size(); ++i)
    RETORT_INPUT_CHECK(ids[i] >= -1 && ids[i] < chunk_count,
                       "{}: the {} chunk id {} at position {} is outside [-1, {}): chunk_count must cover every chunk "
                       "id of the alignment (-1 = in no chunk)",
                       op, side, ids[i], i, chunk_count);
}

}  // namespace

ChunkIndex build_chunk_index(int64_t student_rows, const ChunkTeacherTargets& teacher, const ChunkAssignment& chunks,
                             int64_t teacher_vocab, std::string_view op) {
  RETORT_INPUT_CHECK(
      teacher.ids.defined() && teacher.ids.dtype() == DType::I32 && teacher.ids.ndim() >= 2 && teacher.ids.size(-1) > 0,
      "{}: teacher ids {} must be i32 [N_t, K] (or [..., K], positions flattened) with K >= 1", op,
      teacher.ids.defined() ? teacher.ids.describe() : "(undefined)");
  RETORT_INPUT_CHECK(teacher.logprobs.defined() && is_floating(teacher.logprobs.dtype()) &&
                         teacher.logprobs.shape() == teacher.ids.shape(),
                     "{}: teacher log-probs {} must be floating and shaped like the teacher ids {}", op,
                     teacher.logprobs.defined() ? teacher.logprobs.describe() : "(undefined)", teacher.ids.describe());
  const int64_t k = teacher.ids.size(-1), n_t = teacher.ids.numel() / k;
  RETORT_INPUT_CHECK(k < teacher_vocab,
                     "{}: K = {} teacher ids per position for a teacher vocabulary of {}: the rest bucket needs K < "
                     "V_t (check the projection's teacher_vocab)",
                     op, k, teacher_vocab);
  RETORT_INPUT_CHECK(chunks.chunk_count >= 0, "{}: chunk_count {} is negative", op, chunks.chunk_count);
  RETORT_INPUT_CHECK(chunks.student_chunk.defined() && chunks.student_chunk.dtype() == DType::I32 &&
                         chunks.student_chunk.numel() == student_rows,
                     "{}: student chunk ids {} must be i32 with one id per student row ({})", op,
                     chunks.student_chunk.defined() ? chunks.student_chunk.describe() : "(undefined)", student_rows);
  RETORT_INPUT_CHECK(chunks.teacher_chunk.defined() && chunks.teacher_chunk.dtype() == DType::I32 &&
                         chunks.teacher_chunk.numel() == n_t,
                     "{}: teacher chunk ids {} must be i32 with one id per teacher position ({})", op,
                     chunks.teacher_chunk.defined() ? chunks.teacher_chunk.describe() : "(undefined)", n_t);
  const std::vector<int32_t> student_chunk = host_ints(chunks.student_chunk);
  const std::vector<int32_t> teacher_chunk = host_ints(chunks.teacher_chunk);
  check_chunk_ids(student_chunk, chunks.chunk_count, op, "student");
  check_chunk_ids(teacher_chunk, chunks.chunk_count, op, "teacher");
  const std::vector<int32_t> ids = host_ints(teacher.ids);
  const std::vector<double> logprobs = teacher.logprobs.to(Device::cpu()).to_doubles();
  // V_t-sized tables, kept per thread from call to call: allocating and clearing them (several MB, page faults
  // included) every step cost more than their use. Entries are stamped with numbers that only grow from call to
  // call (a call's first stamp is past the last one used), so nothing needs clearing; the chunk stamps restart, with
  // the table cleared, before they would overflow.
  struct SlotEntry {
    int32_t chunk = -1;  // the (stamped) chunk whose S_c holds the teacher id
    int32_t slot = 0;    // its slot in that S_c
  };
  struct Part {  // a worker thread's table and lists (below)
    std::vector<SlotEntry> table;
    std::vector<int32_t> slots;
    std::vector<double> log;
  };
  thread_local std::vector<int64_t> last_row;
  thread_local std::vector<SlotEntry> slot_table;
  thread_local std::vector<Part> kept_parts;
  thread_local int64_t next_row_stamp = 0;
  thread_local int32_t next_chunk_stamp = 0;
  if (static_cast<int64_t>(last_row.size()) < teacher_vocab) {
    last_row.assign(static_cast<size_t>(teacher_vocab), -1);
    slot_table.assign(static_cast<size_t>(teacher_vocab), SlotEntry{});
  }
  // Before the chunk stamps would overflow: every table cleared (the workers' ones too) and stamps from 0.
  const bool reset_tables = chunks.chunk_count > std::numeric_limits<int32_t>::max() - next_chunk_stamp;
  if (reset_tables) {
    std::fill(slot_table.begin(), slot_table.end(), SlotEntry{});
    for (Part& part : kept_parts) part.table.clear();
    next_chunk_stamp = 0;
  }
  const int64_t row_stamp = next_row_stamp;
  next_row_stamp += n_t;
  {
    constexpr int64_t kAhead = 16;  // prefetch distance in ids: the table lookups are random over V_t
    for (int64_t t = 0; t < n_t; ++t)
      for (int64_t i = 0; i < k; ++i) {
        if (t * k + i + kAhead < n_t * k) {
          const int32_t ahead = ids[static_cast<size_t>(t * k + i + kAhead)];
          if (ahead >= 0 && ahead < teacher_vocab) __builtin_prefetch(last_row.data() + ahead);
        }
        const int32_t v = ids[static_cast<size_t>(t * k + i)];
        RETORT_INPUT_CHECK(v >= 0 && v < teacher_vocab,
                           "{}: teacher id {} at position {}, slot {} is outside the teacher vocabulary of {}: the "
                           "teacher targets and the projection disagree on the teacher's vocabulary",
                           op, v, t, i, teacher_vocab);
        RETORT_INPUT_CHECK(last_row[static_cast<size_t>(v)] != row_stamp + t,
                           "{}: teacher id {} appears twice at position {}: the K ids of a position must be distinct",
                           op, v, t);
        last_row[static_cast<size_t>(v)] = row_stamp + t;
      }
  }

  ChunkIndex x;
  x.student_rows = student_rows;
  x.teacher_rows = n_t;
  x.topk = k;
  x.teacher_vocab = teacher_vocab;
  const size_t all = static_cast<size_t>(chunks.chunk_count);
  std::vector<int32_t> n_student(all, 0), n_teacher(all, 0), compact(all, -1);
  for (int32_t c : student_chunk)
    if (c >= 0) ++n_student[static_cast<size_t>(c)];
  for (int32_t c : teacher_chunk)
    if (c >= 0) ++n_teacher[static_cast<size_t>(c)];
  for (size_t c = 0; c < all; ++c)
    if (n_student[c] > 0 && n_teacher[c] > 0) compact[c] = static_cast<int32_t>(x.chunks++);
  const size_t nc = static_cast<size_t>(x.chunks);

  // Rows of either side grouped by valid chunk (a counting sort keeps them increasing).
  auto group = [&](const std::vector<int32_t>& side, std::vector<int32_t>& offsets, std::vector<int32_t>& out) {
    offsets.assign(nc + 1, 0);
    for (int32_t c : side)
      if (c >= 0 && compact[static_cast<size_t>(c)] >= 0) ++offsets[static_cast<size_t>(compact[c]) + 1];
    for (size_t c = 0; c < nc; ++c) offsets[c + 1] += offsets[c];
    out.assign(static_cast<size_t>(offsets[nc]), 0);
    std::vector<int32_t> fill(offsets.begin(), offsets.end() - 1);
    for (size_t r = 0; r < side.size(); ++r)
      if (side[r] >= 0 && compact[static_cast<size_t>(side[r])] >= 0)
        out[static_cast<size_t>(fill[static_cast<size_t>(compact[side[r]])]++)] = static_cast<int32_t>(r);
  };
  group(student_chunk, x.chunk_rows, x.rows);
  std::vector<int32_t> teacher_offsets, teacher_list;
  group(teacher_chunk, teacher_offsets, teacher_list);
  x.row_chunk.assign(static_cast<size_t>(student_rows), -1);
  for (size_t r = 0; r < student_chunk.size(); ++r)
    if (student_chunk[r] >= 0) x.row_chunk[r] = compact[static_cast<size_t>(student_chunk[r])];

  // Per teacher position: log rest_t and the log-probability of each of its V_t - K unlisted ids.
  std::vector<double> log_rest(static_cast<size_t>(n_t));
  for (int64_t t = 0; t < n_t; ++t) {
    const double* l = logprobs.data() + t * k;
    double m = kNegInf;
    for (int64_t i = 0; i < k; ++i) m = std::max(m, l[i]);
    double s = 0;
    if (m != kNegInf)
      for (int64_t i = 0; i < k; ++i) s += std::exp(l[i] - m);
    const double lse = m == kNegInf ? kNegInf : m + std::log(s);
    log_rest[static_cast<size_t>(t)] = kernels::topk::teacher_log_rest(lse);
  }
  const double unlisted_count = static_cast<double>(teacher_vocab - k);

  // S_c and R_c: slot_table[v] holds v's slot while v is in the current chunk's set (stamped by chunk).
  const int32_t chunk_base = next_chunk_stamp;
  next_chunk_stamp += static_cast<int32_t>(nc);
  x.chunk_slots.assign(nc + 1, 0);
  x.teacher_rest.assign(nc, 0);
  x.teacher_unlisted.assign(nc, 0);
  // Chunks [c0, c1): their S_c appended to slots_out and their R_c to log_out, |S_c| into chunk_slots[c + 1] (the
  // offsets are summed at the end), R_c,rest and the unlisted R_c in place. `table` is only this range's.
  auto index_chunks = [&](size_t c0, size_t c1, std::vector<SlotEntry>& table, std::vector<int32_t>& slots_out,
                          std::vector<double>& log_out) {
    // The table entries of a chunk's teacher ids, fetched while the chunk before it is worked on.
    auto prefetch_chunk = [&](size_t c) {
      if (c >= c1) return;
      for (int32_t i = teacher_offsets[c]; i < teacher_offsets[c + 1]; ++i) {
        const int64_t t = teacher_list[static_cast<size_t>(i)];
        for (int64_t j = 0; j < k; ++j) __builtin_prefetch(table.data() + ids[static_cast<size_t>(t * k + j)]);
      }
    };
    prefetch_chunk(c0);
    std::vector<double> listed, sum;
    for (size_t c = c0; c < c1; ++c) {
      const int32_t t0 = teacher_offsets[c], t1 = teacher_offsets[c + 1];
      const size_t first = slots_out.size();
      prefetch_chunk(c + 1);
      const int32_t stamp = chunk_base + static_cast<int32_t>(c);
      for (int32_t i = t0; i < t1; ++i) {
        const int64_t t = teacher_list[static_cast<size_t>(i)];
        for (int64_t j = 0; j < k; ++j) {
          const int32_t v = ids[static_cast<size_t>(t * k + j)];
          if (table[static_cast<size_t>(v)].chunk == stamp) continue;
          table[static_cast<size_t>(v)].chunk = stamp;
          slots_out.push_back(v);
        }
      }
      std::sort(slots_out.begin() + static_cast<ptrdiff_t>(first), slots_out.end());
      const size_t width = slots_out.size() - first;
      for (size_t g = first; g < slots_out.size(); ++g)
        table[static_cast<size_t>(slots_out[g])].slot = static_cast<int32_t>(g - first);
      x.chunk_slots[c + 1] = static_cast<int32_t>(width);
      // R_c,v = the mean over the chunk's teacher positions of the listed value or the unlisted one.
      sum.assign(width, 0.0);
      double rest = 0, unlisted_sum = 0;
      const double outside_ids = unlisted_count - static_cast<double>(width - static_cast<size_t>(k));
      for (int32_t i = t0; i < t1; ++i) {
        const int64_t t = teacher_list[static_cast<size_t>(i)];
        const double unlisted = log_rest[static_cast<size_t>(t)] - std::log(unlisted_count);
        listed.assign(width, std::numeric_limits<double>::quiet_NaN());
        for (int64_t j = 0; j < k; ++j)
          listed[static_cast<size_t>(table[static_cast<size_t>(ids[static_cast<size_t>(t * k + j)])].slot)] =
              logprobs[static_cast<size_t>(t * k + j)];
        for (size_t g = 0; g < width; ++g) sum[g] += std::isnan(listed[g]) ? unlisted : listed[g];
        unlisted_sum += unlisted;
        // The tail mass of t left outside S_c: its rest spread over V_t - K ids, of which m_t = |S_c| - K are in
        // S_c.
        rest += outside_ids > 0 ? log_rest[static_cast<size_t>(t)] + std::log(outside_ids / unlisted_count) : kNegInf;
      }
      const double n = static_cast<double>(t1 - t0);
      for (size_t g = 0; g < width; ++g) log_out.push_back(sum[g] / n);
      x.teacher_rest[c] = rest / n;
      x.teacher_unlisted[c] = unlisted_sum / n;
    }
  };
  // Above a few thousand teacher ids, ranges of chunks go to worker threads (bound by memory latency, they overlap
  // their misses), each with its own table and lists, kept from call to call; the parts are appended in chunk
  // order, so the index is the same as one thread's.
  const int64_t work = static_cast<int64_t>(teacher_list.size()) * k;
  const int workers =
      static_cast<int>(std::min<int64_t>({static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())),
                                          kMaxIndexThreads, work / kIdsPerIndexThread, static_cast<int64_t>(nc)}));
  if (workers <= 1) {
    index_chunks(0, nc, slot_table, x.slot_ids, x.teacher_log);
  } else {
    if (kept_parts.size() < static_cast<size_t>(workers)) kept_parts.resize(static_cast<size_t>(workers));
    std::vector<Part>& parts = kept_parts;  // this thread's: a worker naming kept_parts would get its own
    {
      std::vector<std::jthread> threads;
      for (int w = 0; w < workers; ++w) {
        const size_t c0 = nc * static_cast<size_t>(w) / static_cast<size_t>(workers);
        const size_t c1 = nc * static_cast<size_t>(w + 1) / static_cast<size_t>(workers);
        threads.emplace_back([&, w, c0, c1] {
          Part& part = parts[static_cast<size_t>(w)];
          if (static_cast<int64_t>(part.table.size()) < teacher_vocab)
            part.table.assign(static_cast<size_t>(teacher_vocab), SlotEntry{});
          part.slots.clear();
          part.log.clear();
          index_chunks(c0, c1, part.table, part.slots, part.log);
        });
      }
    }
    for (int w = 0; w < workers; ++w) {
      x.slot_ids.insert(x.slot_ids.end(), parts[static_cast<size_t>(w)].slots.begin(),
                        parts[static_cast<size_t>(w)].slots.end());
      x.teacher_log.insert(x.teacher_log.end(), parts[static_cast<size_t>(w)].log.begin(),
                           parts[static_cast<size_t>(w)].log.end());
    }
  }
  for (size_t c = 0; c < nc; ++c) x.chunk_slots[c + 1] += x.chunk_slots[c];
  return x;
}

HostProjection host_projection(const VocabProjection& projection, int64_t student_vocab, std::string_view op) {
  RETORT_INPUT_CHECK(projection.student_vocab == student_vocab,
                     "{}: the projection maps {} student ids, the student logits have a vocabulary of {}: the "
                     "projection was built for another student tokenizer",
                     op, projection.student_vocab, student_vocab);
  RETORT_INPUT_CHECK(projection.row_offsets.defined() && projection.row_offsets.dtype() == DType::I32 &&
                         projection.row_offsets.numel() == student_vocab + 1,
                     "{}: projection row_offsets {} must be i32 [student_vocab + 1 = {}]", op,
                     projection.row_offsets.defined() ? projection.row_offsets.describe() : "(undefined)",
                     student_vocab + 1);
  HostProjection h;
  h.row_offsets = host_ints(projection.row_offsets);
  const int64_t nnz = h.row_offsets.back();
  RETORT_INPUT_CHECK(h.row_offsets[0] == 0 && std::is_sorted(h.row_offsets.begin(), h.row_offsets.end()),
                     "{}: projection row_offsets must start at 0 and never decrease", op);
  RETORT_INPUT_CHECK(projection.teacher_ids.defined() && projection.teacher_ids.dtype() == DType::I32 &&
                         projection.teacher_ids.numel() == nnz && projection.weights.defined() &&
                         projection.weights.numel() == nnz && is_floating(projection.weights.dtype()),
                     "{}: projection teacher_ids (i32) and weights (floating) must hold the {} entries row_offsets "
                     "names",
                     op, nnz);
  if (nnz > 0) {
    h.teacher_ids = host_ints(projection.teacher_ids);
    h.weights = projection.weights.to(Device::cpu()).to_doubles();
  }
  for (int64_t e = 0; e < nnz; ++e) {
    RETORT_INPUT_CHECK(
        h.teacher_ids[static_cast<size_t>(e)] >= 0 && h.teacher_ids[static_cast<size_t>(e)] < projection.teacher_vocab,
        "{}: projection entry {} maps to teacher id {}, outside the teacher vocabulary of {}", op, e,
        h.teacher_ids[static_cast<size_t>(e)], projection.teacher_vocab);
    RETORT_INPUT_CHECK(std::isfinite(h.weights[static_cast<size_t>(e)]) && h.weights[static_cast<size_t>(e)] >= 0,
                       "{}: projection entry {} has weight {}; weights must be finite and >= 0", op, e,
                       h.weights[static_cast<size_t>(e)]);
  }
  return h;
}

Tensor upload_ints(const std::vector<int32_t>& values, Device device) {
  if (values.empty()) return Tensor::from_ints({0}, {1}, device);
  return Tensor::from_ints(values, {static_cast<int64_t>(values.size())}, device);
}

Tensor upload_reals(const std::vector<double>& values, DType dtype, Device device) {
  if (values.empty()) return Tensor::from_doubles({0.0}, {1}, dtype, device);
  return Tensor::from_doubles(values, {static_cast<int64_t>(values.size())}, dtype, device);
}

}  // namespace retort::losses::chunk_index
