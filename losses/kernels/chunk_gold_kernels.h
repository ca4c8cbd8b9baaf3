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

#ifdef RETORT_WITH_CUDA
namespace cuda {
// The plan on the GPU (f32 values), plus the teacher's sorted uncommon probabilities of each chunk in compact form
// (see chunk_gold.cpp: `listed` decreasing, `above` of them before `fill_count` copies of `fill`).
struct GoldDevicePlan {
  int64_t chunks = 0, rows = 0, vocab_start = 0, top = 0, local_top = 0;  // local_top = min(m, local uncommon ids)
  int64_t n_student = 0, n_teacher = 0;  // how many sorted values each side compares: min(m, its uncommon ids)
  float inv_temperature = 1.f;
  Tensor row_chunk, chunk_rows, rows_list, chunk_scale;     // i32 [N], i32 [C + 1], i32, f32 [C]
  Tensor common;                                            // i32 [V_valid]
  Tensor unlisted;                                          // f32 [C]
  Tensor special_offsets, special_column, special_teacher;  // i32 [C + 1], i32, f32
  Tensor listed_offsets, listed, above, fill, fill_count;   // i32 [C + 1], f32, i32 [C], f32 [C], i32 [C]
  Tensor common_g;                                          // f32 [C]: the common ids' part of G_c
};
// The largest m the CUDA passes take (a chunk's local top m is sorted in shared memory).
inline constexpr int64_t kMaxTop = 8192;
void row_stats(const Tensor& student, const GoldDevicePlan& plan, Tensor& local_max, Tensor& partial_sum);
void rescale_sums(const Tensor& local_max, const Tensor& global_max, Tensor& partial_sum);
void finish_lse(const Tensor& global_max, const Tensor& partial_sum, Tensor& lse);
// ls_buffer f32 [C, V_valid] (scratch); candidates f32 [C, candidate_columns(m)]: the local top m LS values (not
// exp) decreasing, their global ids, the common KL part
void chunk_pass(const Tensor& student, const GoldDevicePlan& plan, const Tensor& lse, Tensor& ls_buffer,
                Tensor& candidates);
// gathered f32 [ranks, C, candidate_columns(m)] -> winner_column i32 [C, m] (local column or -1), winner_grad f32
// [C, m], chunk_g f32 [C] (G_c), chunk_loss f32 [C]
void merge(const Tensor& gathered, int64_t ranks, const GoldDevicePlan& plan, int64_t vocab_valid,
           Tensor& winner_column, Tensor& winner_grad, Tensor& chunk_g, Tensor& chunk_loss);
void backward(const Tensor& student, const GoldDevicePlan& plan, const Tensor& lse, const Tensor& winner_column,
              const Tensor& winner_grad, const Tensor& chunk_g, const Tensor& grad_output, double factor,
              bool accumulate, Tensor& dstudent);
}  // namespace cuda
#endif

}  // namespace retort::losses::kernels::gold
