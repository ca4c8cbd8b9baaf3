#pragma once
// Cross-tokenizer distillation losses over aligned chunks (shared/reference xtoken.md sections 2 and 3). The student
// and the teacher read the same text through different tokenizers; an alignment (distill/xtoken/alignment.h) cuts it
// into chunks, and every prediction position of either side belongs to at most one chunk. The losses compare the
// student's and the teacher's distributions per chunk, in the TEACHER's vocabulary.
//
// Student side: logits [N_s, V_s_local], vocab-split over the tp group (rank r owns student ids
// [r V_s_local, (r + 1) V_s_local), padded shards as in parallel/tp/vocab_shard.h), z = x / T, q_t = softmax(z_t).
// The projection W [V_s, V_t] (VocabProjection below: at most 4 teacher ids per student id, rows summing to 1, or an
// empty row for an id that maps to nothing) carries q_t into teacher ids: (q_t W)_v = sum_u q_t,u W_u,v.
//
// Teacher side: per teacher position, a sparse distribution (the top-k cache's form, or the top-k of an online
// teacher's logits): K GLOBAL teacher ids with their log-probabilities at temperature T, normalised over the full
// teacher vocabulary V_t; the tail mass rest_t = 1 - sum_k p_t,k is spread evenly over the V_t - K ids not listed.
//
// Chunk c has student positions P_s(c) and teacher positions P_t(c) and the column set S_c = the union of the teacher
// ids listed at P_t(c), plus one rest bucket for every other teacher id:
//   Q_c,v = mean over P_s(c) of (q_t W)_v for v in S_c;  Q_c,rest = mean over P_s(c) of the mass q_t W puts outside
//     S_c (a masked sum, never 1 - sum);
//   R_c,v = mean over P_t(c) of log p_t,v (listed: its value; unlisted: log(rest_t / (V_t - K)));
//   R_c,rest = mean over P_t(c) of log(rest_t (V_t - K - m_t) / (V_t - K)), m_t = the number of ids of S_c NOT
//     listed at t (= |S_c| - K): the tail mass of position t left outside S_c;
//   chunk KL_c = sum over v in S_c and rest of exp(R_c,v) (R_c,v - log(Q_c,v + 1e-10)), a term whose R is -inf
//     being 0. Q is not renormalised: a student id whose projection row is empty carries its mass nowhere.
// rest_t = 1 - e^{logsumexp_k log p_t,k}, that logsumexp clamped to at most -1e-7 as in the top-k loss (a row whose
// K ids hold all the mass keeps a tail of ~1e-7); K < V_t.
// Loss = T^2 * sum over valid chunks of KL_c / normaliser (the number of valid chunks of this call by default, or
// options.normalizer: the GLOBAL count over data-parallel ranks and micro-batches, which the caller all-reduces
// before any rank skips work).
// With kd_ratio < 1: kd_ratio * KD + (1 - kd_ratio) * CE, CE the vocab-parallel cross-entropy of the student's
// labels (per student position, mean over the valid positions); with dynamic_ce_scaling: sg(|CE| / |KD|) * KD + CE.
//
// Tensor parallelism: every rank holds the same teacher targets, chunk ids and projection; the student-side partial
// sums over its own student ids are SUM all-reduced ([positions] statistics and the packed per-chunk Q columns:
// O(tokens x K) bytes, never a vocabulary). The backward writes each rank's exact LOCAL gradient.
//
// The gold loss (kind kGold; reference section 3) needs no projection matrix for its common part: `common` lists
// the exactly mapped (student id, teacher id) pairs. With the chunk-averaged log-probabilities
//   LS_c,u = mean over P_s(c) of log q_t,u (student, full vocabulary, at temperature T),
//   R_c,v  = mean over P_t(c) of log p_t,v (teacher; unlisted ids: log(rest_t / (V_t - K))), both not renormalised,
//   Gold_c = sum over common pairs (u, v) of exp(R_c,v) (R_c,v - LS_c,u)
//          + sum_i |a_i - b_i|, a = exp(LS_c,.) over the student's uncommon ids sorted decreasing, b = exp(R_c,.) over
//            the teacher's uncommon ids sorted decreasing, each cut at the top gold_uncommon_top (and at what
//            exists), the shorter padded with zeros (ULD's L1).
// Loss = T^2 * sum over valid chunks of Gold_c / normaliser, mixed with the CE as above. Under tp each rank reads its
// own student ids: the row statistics take a MAX and a SUM all-reduce, the common terms a SUM, and each rank's local
// top m per chunk is all-gathered ([tp, chunks, m]) and merged on every rank.
#include <cstdint>
#include <memory>
#include <optional>

#include "core/tensor/tensor.h"
#include "losses/cross_entropy.h"
#include "parallel/comm/communicator.h"

namespace retort::losses {

// A sparse student -> teacher vocabulary map in CSR form over GLOBAL ids (the same on every rank).
struct VocabProjection {
  int64_t student_vocab = 0;  // rows
  int64_t teacher_vocab = 0;  // columns (the teacher model's vocabulary, padding excluded)
  Tensor row_offsets;         // i32 [student_vocab + 1]
  Tensor teacher_ids;         // i32 [nnz]
  Tensor weights;             // f32 [nnz], each row summing to 1 (or an empty row)
};

// The teacher's sparse distributions at its prediction positions.
struct ChunkTeacherTargets {
  Tensor ids;       // i32 [N_t, K] (or [..., K]): global teacher ids, distinct within a row
  Tensor logprobs;  // f32 [N_t, K]: log p at temperature T over the full teacher vocabulary (-inf allowed)
};

struct ChunkAssignment {
  // Chunk ids are per call: a batch of several texts numbers its chunks 0..chunk_count-1 across all of them.
  Tensor student_chunk;  // i32 [N_s]: chunk id of each student prediction position, -1 = in no chunk
  Tensor teacher_chunk;  // i32 [N_t]: the same for the teacher's positions
  int64_t chunk_count = 0;
};

enum class ChunkLossKind { kChunkKL, kGold };

struct ChunkDistillationOptions {
  ChunkLossKind kind = ChunkLossKind::kChunkKL;
  double temperature = 1.0;
  bool scale_by_t_squared = true;
  double kd_ratio = 1.0;            // kd_ratio * KD + (1 - kd_ratio) * CE on the labels
  bool dynamic_ce_scaling = false;  // sg(|CE| / |KD|) KD + CE instead of the fixed ratio
  int ignore_index = -100;
  std::optional<double> normalizer;     // chunks: the global valid-chunk count
  std::optional<double> ce_normalizer;  // positions: the global valid-label count
  std::shared_ptr<Communicator> group;  // the student's tp group; default from student.sharding()
  int64_t gold_uncommon_top = 8192;     // kGold: m, the sorted uncommon probabilities compared per side
};

// kGold: the exactly mapped id pairs, GLOBAL ids, the same on every rank; no student id and no teacher id twice.
struct CommonIds {
  Tensor student_ids;  // i32 [P]
  Tensor teacher_ids;  // i32 [P]
};

struct ChunkDistillationResult {
  Tensor loss;            // 0-dim, on the tape
  double kd = 0, ce = 0;  // the parts, for metrics
};

// CommonIds from a pairs table i32 [P, 2] of (student id, teacher id) rows (distill/xtoken's common_ids form).
CommonIds common_ids_from_pairs(const Tensor& pairs);

// The number of valid chunks of an assignment (at least one student and one teacher position): what a caller sums
// over data-parallel ranks and micro-batches, BEFORE any rank may skip work, to pass as options.normalizer.
int64_t valid_chunk_count(const ChunkAssignment& chunks);

// student [N_s, V_s_local] (or [..., V_s_local], rows flattened): f32 or bf16 on the CPU or CUDA, f64 on the CPU.
// labels i32 [N_s] or undefined (then kd_ratio must be 1 and dynamic_ce_scaling off). The chunk ids, the teacher
// targets and the projection may live on the host or on the student's device: the op reads them on the host (it
// builds its index of the chunks there), so device copies cost one wait for the stream. `common` is read by kGold
// only (the projection is then unused and may be empty). The loss is a 0-dim tensor (f64 for f64 logits) on the
// tape, equal on every rank; its backward writes each rank's exact LOCAL gradient, with no collective.
ChunkDistillationResult chunk_distillation_loss(const Tensor& student, const Tensor& labels,
                                                const ChunkTeacherTargets& teacher, const ChunkAssignment& chunks,
                                                const VocabProjection& projection,
                                                const ChunkDistillationOptions& options = {},
                                                const CommonIds& common = {});

}  // namespace retort::losses
