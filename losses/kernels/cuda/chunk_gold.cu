// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The CUDA passes of the vocab-parallel gold loss (chunk_gold_kernels.h). Float32 arithmetic.
//   row_stats    one block per row: the local max of z and the sum of e^{z - max} in one read (per-thread running
//                statistics merged at the end)
//   chunk_pass   one block per chunk writes LS_c,. over the shard (the chunk's 1-3 rows read together, coalesced)
//                with the common KL part as a masked sum (the chunk's "special" columns, sorted, found by a
//                per-thread cursor); then one block per chunk selects the local top m uncommon LS values EXACTLY:
//                a radix select on order-preserving 32-bit keys (4 passes of 8-bit histograms) finds the m-th key,
//                an ordered compaction (block scans over column tiles, so ties go to the smaller column) gathers
//                the m winners, and a bitonic sort in shared memory orders them (value decreasing, id increasing)
//   merge        one block per chunk: each gathered candidate's global rank is its index in its own sorted list
//                plus, from a binary search, how many candidates of each other list beat it; the ranks < n_a are
//                the merged top, compared with the teacher's sorted uncommon probabilities (|a_i - b_i|,
//                g_i = sign(a_i - b_i) a_i)
//   backward     one block per row: (g_j - q_j G_c) / n over the shard, then the row's chunk's winners added
#include <mutex>
#include <set>

#include "losses/kernels/chunk_gold_kernels.h"

namespace retort::losses::kernels::gold::cuda {
namespace {
using namespace ::retort::kernels::cuda::detail;

constexpr int kRowThreads = 512;
constexpr int kSelectThreads = 1024;

const int32_t* ints(const Tensor& t) {
  return t.data<int32_t>();
}
const float* reals(const Tensor& t) {
  return t.data<float>();
}

// Per-thread running (max, sum of e^{v - max}).
struct Running {
  float max = -INFINITY, sum = 0.f;
  __device__ void add(float v) {
    if (v == -INFINITY) return;
    if (v > max) {
      sum = (max == -INFINITY ? 0.f : sum * expf(max - v)) + 1.f;
      max = v;
    } else {
      sum += expf(v - max);
    }
  }
};

template <typename TS>
__global__ void row_stats_kernel(const TS* student, const int32_t* row_chunk, float inv_t, float* local_max,
                                 float* partial_sum, int64_t rows, int64_t vocab) {
  __shared__ float scratch[64];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    if (row_chunk[r] < 0) {
      if (threadIdx.x == 0) local_max[r] = -INFINITY, partial_sum[r] = 0.f;
      continue;
    }
    Running run;
    visit_row(student + r * vocab, vocab, [&](int64_t, float x) { run.add(x * inv_t); });
    const float m = block_max(run.max, scratch);
    const float mine = run.max == -INFINITY ? 0.f : run.sum * expf(run.max - m);
    const float2 s = block_sum2(make_float2(mine, 0.f), scratch);
    if (threadIdx.x == 0) local_max[r] = m, partial_sum[r] = s.x;
  }
}

__global__ void rescale_kernel(const float* local_max, const float* global_max, float* sums, int64_t rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x)
    sums[r] *= local_max[r] == -INFINITY ? 0.f : expf(local_max[r] - global_max[r]);
}

__global__ void lse_kernel(const float* global_max, const float* sums, float* lse, int64_t rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x)
    lse[r] = global_max[r] + logf(sums[r]);
}

__device__ __forceinline__ float xlogy_term(float r, float log_q) {
  return r == -INFINITY ? 0.f : expf(r) * (r - log_q);
}

// A thread's position in a chunk's sorted special columns; valid while it asks for increasing columns.
struct Cursor {
  int at = 0;
  __device__ __forceinline__ int find(int64_t j, const int32_t* columns, int count) {
    while (at < count && columns[at] < j) ++at;
    return at < count && columns[at] == j ? at : -1;
  }
};

template <typename TS>
__global__ void ls_kernel(const TS* student, const int32_t* chunk_rows, const int32_t* rows_list,
                          const float* chunk_scale, const int32_t* common, const float* unlisted,
                          const int32_t* special_offsets, const int32_t* special_column, const float* special_teacher,
                          const float* lse, float inv_t, float* ls, float* candidates, int64_t width, int64_t top,
                          int64_t chunks, int64_t vocab) {
  __shared__ double scratch[32];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int r0 = chunk_rows[c], r1 = chunk_rows[c + 1];
    const float inv_n = chunk_scale[c], u = unlisted[c];
    const int s0 = special_offsets[c], count = special_offsets[c + 1] - s0;
    float* row = ls + c * vocab;
    double common_kl = 0.0;
    Cursor cursor;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      float v = 0.f;
      for (int i = r0; i < r1; ++i) {
        const int r = rows_list[i];
        v += to_f32(student[r * vocab + j]) * inv_t - lse[r];
      }
      v *= inv_n;
      row[j] = v;
      if (!common[j]) continue;
      const int at = cursor.find(j, special_column + s0, count);
      common_kl += at >= 0 ? xlogy_term(special_teacher[s0 + at], v) : (u == -INFINITY ? 0.f : expf(u) * (u - v));
    }
    common_kl = block_sum(common_kl, scratch);
    if (threadIdx.x == 0) candidates[c * width + 2 * top] = static_cast<float>(common_kl);
  }
}

// An order-preserving key of a float (larger float, larger key); 0 marks a column that takes no part (a common id),
// below every real float's key.
__device__ __forceinline__ uint32_t key_of(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float value_of(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

// Block-wide exclusive prefix sum of 0/1 flags; returns this thread's offset and writes the tile's total.
__device__ int block_exclusive_scan(int flag, int* warp_totals, int* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  const int in_warp = __popc(ballot & ((1u << lane) - 1u));
  if (lane == 0) warp_totals[warp] = __popc(ballot);
  __syncthreads();
  // Warp 0 scans the warp totals with shuffles and leaves each warp's exclusive offset in place. (Every thread
  // summing the totals itself, 32 shared loads per thread and scan, twice per column tile, made the select kernel
  // bound by instruction issue.)
  if (warp == 0) {
    const int mine = lane < warps ? warp_totals[lane] : 0;
    int inclusive = mine;
    for (int d = 1; d < 32; d <<= 1) {
      const int other = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive += other;
    }
    if (lane < warps) warp_totals[lane] = inclusive - mine;
    if (lane == 31) *total = inclusive;
  }
  __syncthreads();
  return warp_totals[warp] + in_warp;
}

__global__ void select_kernel(const float* ls, const int32_t* common, int64_t chunks, int64_t vocab, int64_t top,
                              int local_top, int sort_size, int64_t vocab_start, int64_t width, float* candidates) {
  extern __shared__ unsigned long long sorted[];  // [sort_size]
  __shared__ int histogram[256];
  __shared__ int warp_totals[32];
  __shared__ int tile_total;
  __shared__ uint32_t chosen_prefix;
  __shared__ int chosen_remaining;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const float* row = ls + c * vocab;
    auto key = [&](int64_t j) -> uint32_t { return j < vocab && !common[j] ? key_of(row[j]) : 0u; };
    // Radix select: the local_top-th largest key, 8 bits at a time from the top.
    uint32_t prefix = 0, mask = 0;
    int remaining = local_top;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += blockDim.x) histogram[i] = 0;
      __syncthreads();
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
        const uint32_t k = key(j);
        if (k != 0u && (k & mask) == prefix) atomicAdd(&histogram[(k >> shift) & 255u], 1);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int above = 0, d = 255;
        for (; d > 0; --d) {
          if (above + histogram[d] >= remaining) break;
          above += histogram[d];
        }
        chosen_prefix = prefix | (static_cast<uint32_t>(d) << shift);
        chosen_remaining = remaining - above;
      }
      __syncthreads();
      prefix = chosen_prefix;
      remaining = chosen_remaining;
      mask |= 255u << shift;
    }
    const uint32_t threshold = prefix;
    const int greater = local_top - remaining;  // keys above the threshold, all taken; then `remaining` equal ones
    // Ordered compaction over column tiles: the keys above the threshold, and the first `remaining` equal ones.
    int taken_greater = 0, taken_equal = 0;
    for (int64_t base = 0; base < vocab; base += blockDim.x) {
      const int64_t j = base + threadIdx.x;
      const uint32_t k = key(j);
      const int gt = k > threshold, eq = k == threshold && k != 0u;
      const int at_gt = block_exclusive_scan(gt, warp_totals, &tile_total);
      const int tile_gt = tile_total;
      const int at_eq = block_exclusive_scan(eq, warp_totals, &tile_total);
      const int tile_eq = tile_total;
      // Descending by key, then ascending by column: key in the high half, the column's complement in the low.
      const unsigned long long packed =
          (static_cast<unsigned long long>(k) << 32) | (0xFFFFFFFFull - static_cast<unsigned long long>(j));
      if (gt) sorted[taken_greater + at_gt] = packed;
      if (eq && taken_equal + at_eq < remaining) sorted[greater + taken_equal + at_eq] = packed;
      taken_greater += tile_gt;
      taken_equal += tile_eq;
    }
    for (int i = local_top + threadIdx.x; i < sort_size; i += blockDim.x) sorted[i] = 0ull;
    __syncthreads();
    // Bitonic sort, decreasing.
    for (int size = 2; size <= sort_size; size <<= 1)
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int i = threadIdx.x; i < sort_size; i += blockDim.x) {
          const int partner = i ^ stride;
          if (partner <= i) continue;
          const bool descending = (i & size) == 0;
          const unsigned long long a = sorted[i], b = sorted[partner];
          if ((a < b) == descending) sorted[i] = b, sorted[partner] = a;
        }
        __syncthreads();
      }
    float* out = candidates + c * width;
    for (int64_t i = threadIdx.x; i < top; i += blockDim.x) {
      if (i < local_top) {
        const unsigned long long p = sorted[i];
        const int64_t column = static_cast<int64_t>(0xFFFFFFFFull - (p & 0xFFFFFFFFull));
        out[i] = value_of(static_cast<uint32_t>(p >> 32));
        out[top + i] = static_cast<float>(vocab_start + column);
      } else {
        out[i] = -INFINITY;
        out[top + i] = -1.f;
      }
    }
    __syncthreads();
  }
}

// a before b: larger LS, then the smaller id.
__device__ __forceinline__ bool better(float va, float ia, float vb, float ib) {
  return va > vb || (va == vb && ia < ib);
}

// How many of the first n entries of a sorted candidate list beat (v, id).
__device__ int count_better(const float* values, const float* ids, int n, float v, float id) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (better(values[mid], ids[mid], v, id))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

__device__ __forceinline__ float teacher_at(int64_t i, const float* listed, int above, float fill, int fill_count) {
  if (i < above) return listed[i];
  if (i < above + fill_count) return fill;
  return listed[i - fill_count];
}

__global__ void merge_kernel(const float* gathered, int64_t ranks, int64_t chunks, int64_t width, int64_t top,
                             int64_t n_student, int64_t n_teacher, int64_t vocab_start, int64_t vocab_valid,
                             const int32_t* listed_offsets, const float* listed, const int32_t* above,
                             const float* fill, const int32_t* fill_count, const float* common_g,
                             int32_t* winner_column, float* winner_grad, float* chunk_g, float* chunk_loss) {
  __shared__ double scratch[32];
  __shared__ int lengths[64];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    // Each list's length: its ids are -1 past the end.
    for (int64_t r = threadIdx.x; r < ranks; r += blockDim.x) {
      const float* ids = gathered + (r * chunks + c) * width + top;
      int lo = 0, hi = static_cast<int>(top);
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ids[mid] >= 0.f)
          lo = mid + 1;
        else
          hi = mid;
      }
      lengths[r] = lo;
    }
    for (int64_t i = threadIdx.x; i < top; i += blockDim.x) winner_column[c * top + i] = -1;
    __syncthreads();
    const float* t_listed = listed + listed_offsets[c];
    const int t_above = above[c], t_fill_count = fill_count[c];
    const float t_fill = fill[c];
    double l1 = 0.0, g_sum = 0.0, common_kl = 0.0;
    for (int64_t e = threadIdx.x; e < ranks * top; e += blockDim.x) {
      const int64_t r = e / top, i = e % top;
      if (i >= lengths[r]) continue;
      const float* base = gathered + (r * chunks + c) * width;
      const float v = base[i], id = base[top + i];
      int64_t rank = i;
      for (int64_t o = 0; o < ranks; ++o)
        if (o != r) {
          const float* other = gathered + (o * chunks + c) * width;
          rank += count_better(other, other + top, lengths[o], v, id);
        }
      if (rank >= n_student) continue;
      const float a = expf(v);
      const float b = rank < n_teacher ? teacher_at(rank, t_listed, t_above, t_fill, t_fill_count) : 0.f;
      l1 += fabsf(a - b);
      const float g = (a > b ? 1.f : a < b ? -1.f : 0.f) * a;
      g_sum += g;
      const int64_t local = static_cast<int64_t>(id) - vocab_start;
      if (local >= 0 && local < vocab_valid) {
        winner_column[c * top + rank] = static_cast<int32_t>(local);
        winner_grad[c * top + rank] = g;
      }
    }
    // The teacher's values past the student's: |0 - b_i|.
    for (int64_t i = n_student + threadIdx.x; i < n_teacher; i += blockDim.x)
      l1 += teacher_at(i, t_listed, t_above, t_fill, t_fill_count);
    for (int64_t r = threadIdx.x; r < ranks; r += blockDim.x) common_kl += gathered[(r * chunks + c) * width + 2 * top];
    l1 = block_sum(l1, scratch);
    g_sum = block_sum(g_sum, scratch);
    common_kl = block_sum(common_kl, scratch);
    if (threadIdx.x == 0) {
      chunk_g[c] = common_g[c] + static_cast<float>(g_sum);
      chunk_loss[c] = static_cast<float>(common_kl + l1);
    }
    __syncthreads();
  }
}

template <typename TS, typename TO>
__global__ void backward_kernel(const TS* student, const int32_t* row_chunk, const float* chunk_scale,
                                const int32_t* common, const float* unlisted, const int32_t* special_offsets,
                                const int32_t* special_column, const float* special_teacher, const float* lse,
                                const int32_t* winner_column, const float* winner_grad, const float* chunk_g,
                                const float* grad_output, float factor, float inv_t, bool accumulate, TO* dstudent,
                                int64_t rows, int64_t vocab, int64_t top) {
  const float coef_all = *grad_output * factor;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    TO* gr = dstudent + r * vocab;
    const int c = row_chunk[r];
    if (c < 0) {
      if (!accumulate)
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) gr[j] = from_f32<TO>(0.f);
      continue;
    }
    const float coef = coef_all * chunk_scale[c], big_g = chunk_g[c], row_lse = lse[r];
    const float common_grad = unlisted[c] == -INFINITY ? 0.f : -expf(unlisted[c]);
    const int s0 = special_offsets[c], count = special_offsets[c + 1] - s0;
    Cursor cursor;
    const TS* xs = student + r * vocab;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float q = expf(to_f32(xs[j]) * inv_t - row_lse);
      float g = 0.f;
      if (common[j]) {
        const int at = cursor.find(j, special_column + s0, count);
        const float rv = at >= 0 ? special_teacher[s0 + at] : 0.f;
        g = at < 0 ? common_grad : (rv == -INFINITY ? 0.f : -expf(rv));
      }
      const float v = coef * (g - q * big_g);
      gr[j] = from_f32<TO>(accumulate ? to_f32(gr[j]) + v : v);
    }
    __syncthreads();  // the dense values are written before the winners add to theirs
    for (int64_t i = threadIdx.x; i < top; i += blockDim.x) {
      const int col = winner_column[c * top + i];
      if (col >= 0) gr[col] = from_f32<TO>(to_f32(gr[col]) + coef * winner_grad[c * top + i]);
    }
    __syncthreads();
  }
}

}  // namespace

void row_stats(const Tensor& student, const GoldDevicePlan& plan, Tensor& local_max, Tensor& partial_sum) {
  rc::DeviceGuard guard(device_of(student, "chunk gold row_stats"));
  const int64_t rows = student.size(0), vocab = student.size(1);
  if (rows == 0) return;
  dispatch_float(student.dtype(), "chunk gold (student)", [&](auto ts) {
    using TS = typename decltype(ts)::type;
    row_stats_kernel<TS><<<row_grid(rows), row_threads(vocab, kRowThreads), 0, rc::current_stream()>>>(
        student.data<TS>(), ints(plan.row_chunk), plan.inv_temperature, local_max.data<float>(),
        partial_sum.data<float>(), rows, vocab);
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

void rescale_sums(const Tensor& local_max, const Tensor& global_max, Tensor& partial_sum) {
  rc::DeviceGuard guard(device_of(partial_sum, "chunk gold rescale"));
  const int64_t rows = partial_sum.numel();
  if (rows == 0) return;
  rescale_kernel<<<grid_for(rows, 256), 256, 0, rc::current_stream()>>>(reals(local_max), reals(global_max),
                                                                        partial_sum.data<float>(), rows);
  RETORT_CUDA_CHECK_LAUNCH();
}

void finish_lse(const Tensor& global_max, const Tensor& partial_sum, Tensor& lse) {
  rc::DeviceGuard guard(device_of(lse, "chunk gold lse"));
  const int64_t rows = lse.numel();
  if (rows == 0) return;
  lse_kernel<<<grid_for(rows, 256), 256, 0, rc::current_stream()>>>(reals(global_max), reals(partial_sum),
                                                                    lse.data<float>(), rows);
  RETORT_CUDA_CHECK_LAUNCH();
}

// The kernel's shared-memory limit is one setting per device for the whole process, and tensor-parallel ranks on
// threads launch at once with different sizes: a rank that set its smaller size between another's setting and launch
// made that launch invalid. So the limit is raised once per device to what the largest selection (kMaxTop) needs.
static void allow_largest_select() {
  static std::mutex mutex;
  static std::set<int> raised;
  const int device = rc::current_device();
  const std::lock_guard lock(mutex);
  if (!raised.insert(device).second) return;
  int largest = 1;
  while (largest < kMaxTop) largest <<= 1;
  RETORT_CUDA_CHECK(cudaFuncSetAttribute(select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         largest * static_cast<int>(sizeof(unsigned long long))));
}

void chunk_pass(const Tensor& student, const GoldDevicePlan& plan, const Tensor& lse, Tensor& ls_buffer,
                Tensor& candidates) {
  rc::DeviceGuard guard(device_of(student, "chunk gold chunk_pass"));
  const int64_t vocab = student.size(1), width = candidate_columns(plan.top);
  if (plan.chunks == 0) return;
  check(plan.top <= kMaxTop, "chunk_distillation_loss (gold, CUDA): m = {} is above the kernels' limit {}", plan.top,
        kMaxTop);
  dispatch_float(student.dtype(), "chunk gold (student)", [&](auto ts) {
    using TS = typename decltype(ts)::type;
    ls_kernel<TS><<<row_grid(plan.chunks), row_threads(vocab, kRowThreads), 0, rc::current_stream()>>>(
        student.data<TS>(), ints(plan.chunk_rows), ints(plan.rows_list), reals(plan.chunk_scale), ints(plan.common),
        reals(plan.unlisted), ints(plan.special_offsets), ints(plan.special_column), reals(plan.special_teacher),
        reals(lse), plan.inv_temperature, ls_buffer.data<float>(), candidates.data<float>(), width, plan.top,
        plan.chunks, vocab);
    RETORT_CUDA_CHECK_LAUNCH();
  });
  int sort_size = 1;
  while (sort_size < plan.local_top) sort_size <<= 1;
  const size_t shared = static_cast<size_t>(sort_size) * sizeof(unsigned long long);
  allow_largest_select();
  select_kernel<<<row_grid(plan.chunks), kSelectThreads, shared, rc::current_stream()>>>(
      ls_buffer.data<float>(), ints(plan.common), plan.chunks, vocab, plan.top, static_cast<int>(plan.local_top),
      sort_size, plan.vocab_start, width, candidates.data<float>());
  RETORT_CUDA_CHECK_LAUNCH();
}

void merge(const Tensor& gathered, int64_t ranks, const GoldDevicePlan& plan, int64_t vocab_valid,
           Tensor& winner_column, Tensor& winner_grad, Tensor& chunk_g, Tensor& chunk_loss) {
  rc::DeviceGuard guard(device_of(gathered, "chunk gold merge"));
  if (plan.chunks == 0) return;
  check(ranks <= 64, "chunk_distillation_loss (gold, CUDA): {} ranks; the merge takes at most 64", ranks);
  merge_kernel<<<row_grid(plan.chunks), 256, 0, rc::current_stream()>>>(
      reals(gathered), ranks, plan.chunks, candidate_columns(plan.top), plan.top, plan.n_student, plan.n_teacher,
      plan.vocab_start, vocab_valid, ints(plan.listed_offsets), reals(plan.listed), ints(plan.above), reals(plan.fill),
      ints(plan.fill_count), reals(plan.common_g), winner_column.data<int32_t>(), winner_grad.data<float>(),
      chunk_g.data<float>(), chunk_loss.data<float>());
  RETORT_CUDA_CHECK_LAUNCH();
}

void backward(const Tensor& student, const GoldDevicePlan& plan, const Tensor& lse, const Tensor& winner_column,
              const Tensor& winner_grad, const Tensor& chunk_g, const Tensor& grad_output, double factor,
              bool accumulate, Tensor& dstudent) {
  rc::DeviceGuard guard(device_of(student, "chunk gold backward"));
  const int64_t rows = student.size(0), vocab = student.size(1);
  if (rows == 0) return;
  // d/dx = (1/T) d/dz.
  const float f = static_cast<float>(factor * plan.inv_temperature);
  dispatch_float(student.dtype(), "chunk gold backward (student)", [&](auto ts) {
    dispatch_float(dstudent.dtype(), "chunk gold backward (gradient)", [&](auto to) {
      using TS = typename decltype(ts)::type;
      using TO = typename decltype(to)::type;
      backward_kernel<TS, TO><<<row_grid(rows), row_threads(vocab, kRowThreads), 0, rc::current_stream()>>>(
          student.data<TS>(), ints(plan.row_chunk), reals(plan.chunk_scale), ints(plan.common), reals(plan.unlisted),
          ints(plan.special_offsets), ints(plan.special_column), reals(plan.special_teacher), reals(lse),
          ints(winner_column), reals(winner_grad), reals(chunk_g), reals(grad_output), f, plan.inv_temperature,
          accumulate, dstudent.data<TO>(), rows, vocab, plan.top);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace retort::losses::kernels::gold::cuda
