#pragma once
// The raw passes of the vocab-parallel chunk-averaged KL (chunk_distillation.h holds the op and the math). The op
// builds a ChunkPlan on the host (which student columns of this rank's shard feed which teacher column of which
// chunk), then runs, with a CPU and a CUDA implementation of the same signatures:
//   local_stats  one read of each student row in a valid chunk: its local max m_r and, relative to it, the softmax
//                sum, the masked sum of the projected mass outside S_c, and the row's contribution to every column
//                of S_c (gathered through the plan's entries: the few student ids that map into that teacher id)
//   MAX all-reduce of the row maxima, rescale (every partial relative to the global max), ONE SUM all-reduce of
//   the packed partials [N, 2] + [the rows' columns]: O(tokens x K) values, never a vocabulary
//   finish       per chunk Q, KL_c, the derivative of KL_c wrt each Q column and every row's saved statistics
//   backward     one more read of the rows: the gradient from the saved statistics, no collective
// Statistics are f32, or f64 for f64 student logits (CPU only).
//
// Why the projection's transpose: a chunk's columns S_c are a few dozen teacher ids, and each is reached from one
// or two student ids, so gathering through the transpose costs O(|S_c|) reads per row where iterating the row's
// V_local columns through W would cost O(V_local x nnz) random reads per row. The dense read is still needed for
// the softmax sums, and the rest bucket rides along it as a masked sum: the columns that map (partly) into S_c
// are a short sorted list per chunk (the "preimage"), which the CPU marks in a per-thread table and the CUDA
// kernel walks with a cursor, both O(1) per column.
#include <cstdint>

#include "core/tensor/tensor.h"

namespace retort::losses::kernels::chunk {

struct ChunkParams {
  double inv_temperature = 1.0;  // z = x / T
  int64_t vocab_start = 0;       // first global student id of this rank's shard
  double epsilon = 1e-10;        // log(Q + epsilon)
};

// The index of one call over this rank's shard, built on the host, held on the student's device. "Chunks" here
// are the VALID chunks (at least one student and one teacher position), renumbered 0..C-1; "slots" are the
// members of all S_c in chunk order (G of them); columns are LOCAL real columns of the shard.
struct ChunkPlan {
  int64_t chunks = 0, slots = 0, rows = 0;  // C, G, N (student rows, all of them)
  int64_t row_columns = 0;                  // sum over rows in valid chunks of |S_c|
  int64_t max_preimage = 0;                 // the longest preimage list of a chunk
  Tensor row_chunk;                         // i32 [N]: the row's valid chunk, or -1
  Tensor row_column_offset;      // i32 [N]: where the row's |S_c| column partials start (after the [N, 2] block)
  Tensor chunk_rows;             // i32 [C + 1] offsets into chunk_row_list
  Tensor chunk_row_list;         // i32 [rows in valid chunks], grouped by chunk
  Tensor chunk_slots;            // i32 [C + 1] offsets of each chunk's slots
  Tensor slot_entries;           // i32 [G + 1] offsets into entry_column / entry_weight
  Tensor entry_column;           // i32 [E] local student column mapping into the slot's teacher id
  Tensor entry_weight;           // stat [E] its weight W_u,v
  Tensor chunk_preimage;         // i32 [C + 1] offsets into preimage_column
  Tensor preimage_column;        // i32 [P] the local columns mapping into S_c, increasing within a chunk
  Tensor preimage_outside;       // stat [P] the column's projection weight OUTSIDE S_c (an exact small sum)
  Tensor preimage_entries;       // i32 [P + 1] offsets into preimage_entry_slot / preimage_entry_weight
  Tensor preimage_entry_slot;    // i32 [E] the global slot the weight goes to
  Tensor preimage_entry_weight;  // stat [E]
  Tensor column_weight;          // stat [V_valid] each local id's projection row sum (1, or 0 for an empty row)
  Tensor teacher_log;            // stat [G] R_c,v per slot
  Tensor teacher_log_rest;       // stat [C] R_c,rest
  Tensor chunk_scale;            // stat [C] 1 / |P_s(c)|
};

// Columns of the packed per-row partials (the first 2N values of the SUM buffer; the rows' S_c columns follow).
inline constexpr int kRowSum = 0, kRowRest = 1;
inline constexpr int kRowPartials = 2;
// Columns of the saved per-row statistics [N, 3].
inline constexpr int kStatMax = 0, kStatLogSum = 1, kStatCentre = 2;  // M, log sum e^{z - M}, sum_u q_u h_u
inline constexpr int kRowStats = 3;

#define RETORT_CHUNK_KERNELS                                                                                          \
  /* student [N, V_valid] -> local_max [N], partials [2N + row_columns] relative to local_max (rows outside a         \
     valid chunk: max -inf, partials 0) */                                                                            \
  void local_stats(const Tensor& student, const ChunkPlan& plan, const ChunkParams& p, Tensor& local_max,             \
                   Tensor& partials);                                                                                 \
  /* partials relative to local_max -> relative to global_max (in place) */                                           \
  void rescale(const ChunkPlan& plan, const Tensor& local_max, const Tensor& global_max, Tensor& partials);           \
  /* -> row_stats [N, kRowStats], preimage_grad [P] (h of each preimage column), chunk_rest_grad [C] (h per unit of   \
     projection weight elsewhere), chunk_kl [C]; scratch_slots [G] */                                                 \
  void finish(const ChunkPlan& plan, const ChunkParams& p, const Tensor& global_max, const Tensor& partials,          \
              Tensor& row_stats, Tensor& preimage_grad, Tensor& chunk_rest_grad, Tensor& chunk_kl,                    \
              Tensor& scratch_slots);                                                                                 \
  /* loss [] = factor * sum(chunk_kl) */                                                                              \
  void reduce_loss(const Tensor& chunk_kl, double factor, Tensor& loss);                                              \
  /* dstudent (= or += with accumulate) = grad_output * factor * dsum(KL_c)/dx; rows outside a chunk get 0 */         \
  void backward(const Tensor& student, const ChunkPlan& plan, const ChunkParams& p, const Tensor& row_stats,          \
                const Tensor& preimage_grad, const Tensor& chunk_rest_grad, const Tensor& grad_output, double factor, \
                bool accumulate, Tensor& dstudent);

namespace cpu {
RETORT_CHUNK_KERNELS
}  // namespace cpu

#ifdef RETORT_WITH_CUDA
namespace cuda {
RETORT_CHUNK_KERNELS
}  // namespace cuda
#endif

#undef RETORT_CHUNK_KERNELS

}  // namespace retort::losses::kernels::chunk
