#pragma once
// The raw passes of the vocab-parallel gold loss (chunk_distillation.h, kind kGold; the op is losses/chunk_gold.cpp):
//   row_stats    per student row in a valid chunk: the local max of z = x / T and the sum of e^{z - max}
//   (the op: MAX all-reduce, rescale, SUM all-reduce -> lse_t = M + log S, as every vocab-parallel loss)
//   chunk_pass   per chunk over this rank's columns: LS_c,u = mean over the chunk's rows of z_u - lse_t; the common
//                pairs' KL terms (the "special" pairs whose teacher id is in S_c one by one, every other common id
//                against the chunk's unlisted teacher value in one masked sum), and this rank's top m uncommon
//                exp(LS) with their global ids
//   (the op: all-gather of the candidates, the merge to the global top m and the L1 against the teacher's sorted
//   uncommon probabilities, on every rank alike)
//   backward     one read of the rows: dGold_c/dz_t,j = (g_j - q_t,j G_c) / |P_s(c)|, g_j = dGold_c/dLS_c,j
// Statistics are f32, or f64 for f64 student logits. The CPU passes run on host vectors of the plan.
#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::losses::kernels::gold {

// Everything the passes need about the call's chunks over this rank's shard, built on the host.
struct GoldPlan {
  int64_t chunks = 0, rows = 0, vocab_start = 0, top = 0;  // C, N, first global id, m
  double inv_temperature = 1.0;
  std::vector<int32_t> row_chunk;              // [N]: valid chunk or -1
  std::vector<int32_t> chunk_rows, rows_list;  // [C + 1] offsets, rows grouped by chunk
  std::vector<double> chunk_scale;             // [C] 1 / |P_s(c)|
  std::vector<uint8_t> common;                 // [V_valid] 1: the local id is a common student id
  std::vector<double> unlisted;                // [C] R_c of a teacher id listed at none of its positions
  std::vector<int32_t> special_offsets;        // [C + 1] into special_column / special_teacher
  std::vector<int32_t> special_column;         // local common columns whose teacher id is in S_c, increasing
  std::vector<double> special_teacher;         // their R_c,v
  std::vector<int64_t> chunk_other_common;     // [C] the global count of common pairs not special in c
};

// Columns of the per-chunk candidates [C, 2 m + 1]: m values exp(LS) (decreasing, -1 past the end), m global ids
// (as reals, -1 past the end), then this rank's part of the common KL.
inline int64_t candidate_columns(int64_t top) {
  return 2 * top + 1;
}

namespace cpu {
// student [N, V_valid] (f32, f64 or bf16) -> local_max [N], partial_sum [N] (stat dtype)
void row_stats(const Tensor& student, const GoldPlan& plan, Tensor& local_max, Tensor& partial_sum);
// lse [N] global -> candidates [C, candidate_columns(m)]
void chunk_pass(const Tensor& student, const GoldPlan& plan, const Tensor& lse, Tensor& candidates);
// winners: per chunk (offsets [C + 1]) the local columns among the global top m with g = sign(a - b) a; chunk_g [C]
// = G_c = sum over every column of g; dstudent = grad_output * factor * d/dx.
void backward(const Tensor& student, const GoldPlan& plan, const Tensor& lse,
              const std::vector<int32_t>& winner_offsets, const std::vector<int32_t>& winner_column,
              const std::vector<double>& winner_grad, const std::vector<double>& chunk_g, double grad_output,
              double factor, bool accumulate, Tensor& dstudent);
}  // namespace cpu

}  // namespace retort::losses::kernels::gold
