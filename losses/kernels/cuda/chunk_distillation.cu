// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The CUDA passes of the vocab-parallel chunk-averaged KL (chunk_distillation_kernels.h). local_stats and backward
// take one block per student row: the row is read once with 16-byte loads (visit_row), and the row's chunk's
// preimage columns (sorted, copied to shared memory when they fit) are matched with a per-thread cursor, since every
// thread visits its columns in increasing order: O(1) amortised per column, so the rest bucket is a masked sum in
// the same read. The gather of the S_c columns reads only the few student ids mapping into each (thread per slot).
// finish takes one block per chunk (slots over threads); rescale one thread per row. Arithmetic is float32.
#include "losses/kernels/chunk_distillation_kernels.h"

namespace retort::losses::kernels::chunk::cuda {
namespace {
using namespace ::retort::kernels::cuda::detail;

constexpr int kMaxThreads = 512;
constexpr int kChunkThreads = 128;
// Preimage lists up to this many columns are staged in shared memory; longer ones are read from global memory.
constexpr int64_t kSharedPreimage = 8192;

// A thread's position in the chunk's sorted preimage columns; valid while it asks for increasing columns.
struct Cursor {
  int at = 0;
  __device__ __forceinline__ int find(int64_t j, const int* columns, int count) {
    while (at < count && columns[at] < j) ++at;
    return at < count && columns[at] == j ? at : -1;
  }
};

// The chunk's preimage columns, staged in shared memory when they fit (every thread must call it).
__device__ const int* stage_preimage(const int32_t* columns, int count, int* smem, bool staged) {
  if (!staged) return columns;
  for (int i = threadIdx.x; i < count; i += blockDim.x) smem[i] = columns[i];
  __syncthreads();
  return smem;
}

template <typename TS>
__global__ void local_stats_kernel(const TS* student, const int32_t* row_chunk, const int32_t* row_offset,
                                   const int32_t* chunk_pre, const int32_t* pre_column, const float* pre_outside,
                                   const float* column_weight, const int32_t* chunk_slots, const int32_t* slot_entries,
                                   const int32_t* entry_column, const float* entry_weight, float inv_t,
                                   float* local_max, float* partials, int64_t rows, int64_t vocab, bool staged) {
  extern __shared__ int smem[];
  __shared__ float scratch[64];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int c = row_chunk[r];
    float* row_out = partials + r * kRowPartials;
    if (c < 0) {
      if (threadIdx.x == 0) local_max[r] = -INFINITY, row_out[kRowSum] = 0.f, row_out[kRowRest] = 0.f;
      continue;
    }
    const TS* xs = student + r * vocab;
    const int p0 = chunk_pre[c], count = chunk_pre[c + 1] - p0;
    const int* pre = stage_preimage(pre_column + p0, count, smem, staged);
    // One read: per thread a running max with the softmax sum and the masked rest sum relative to it.
    float m = -INFINITY, sum = 0.f, rest = 0.f;
    Cursor cursor;
    visit_row(xs, vocab, [&](int64_t j, float x) {
      const float z = x * inv_t;
      const int at = cursor.find(j, pre, count);
      const float w = at >= 0 ? pre_outside[p0 + at] : column_weight[j];
      if (z == -INFINITY) return;
      if (z > m) {
        const float f = m == -INFINITY ? 0.f : expf(m - z);
        sum = sum * f + 1.f;
        rest = rest * f + w;
        m = z;
      } else {
        const float e = expf(z - m);
        sum += e;
        rest += e * w;
      }
    });
    const float row_max = block_max(m, scratch);
    const float f = m == -INFINITY ? 0.f : expf(m - row_max);
    const float2 sums = block_sum2(make_float2(sum * f, rest * f), scratch);
    if (threadIdx.x == 0) local_max[r] = row_max, row_out[kRowSum] = sums.x, row_out[kRowRest] = sums.y;
    // The row's share of each S_c column, a thread per slot.
    float* columns = partials + 2 * rows + row_offset[r];
    const int s0 = chunk_slots[c], s1 = chunk_slots[c + 1];
    for (int g = s0 + threadIdx.x; g < s1; g += blockDim.x) {
      float v = 0.f;
      if (row_max != -INFINITY)
        for (int e = slot_entries[g]; e < slot_entries[g + 1]; ++e) {
          const float z = to_f32(xs[entry_column[e]]) * inv_t;
          if (z != -INFINITY) v += expf(z - row_max) * entry_weight[e];
        }
      columns[g - s0] = v;
    }
    __syncthreads();  // the staged preimage is reused by the next row
  }
}

__global__ void rescale_kernel(const int32_t* row_chunk, const int32_t* row_offset, const int32_t* chunk_slots,
                               const float* local_max, const float* global_max, float* partials, int64_t rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = row_chunk[r];
    if (c < 0) continue;
    const float f = local_max[r] == -INFINITY ? 0.f : expf(local_max[r] - global_max[r]);
    partials[r * kRowPartials + kRowSum] *= f;
    partials[r * kRowPartials + kRowRest] *= f;
    float* columns = partials + 2 * rows + row_offset[r];
    const int width = chunk_slots[c + 1] - chunk_slots[c];
    for (int i = 0; i < width; ++i) columns[i] *= f;
  }
}

__device__ __forceinline__ float kl_term(float r, float q, float epsilon) {
  return r == -INFINITY ? 0.f : expf(r) * (r - logf(q + epsilon));
}

__global__ void finish_kernel(const int32_t* row_offset, const int32_t* chunk_rows, const int32_t* row_list,
                              const int32_t* chunk_slots, const int32_t* chunk_pre, const float* pre_outside,
                              const int32_t* pre_entries, const int32_t* pre_slot, const float* pre_weight,
                              const float* teacher, const float* teacher_rest, const float* scale,
                              const float* global_max, const float* partials, float epsilon, float* row_stats, float* h,
                              float* rest_grad, float* chunk_kl, float* a, int64_t rows, int64_t chunks) {
  __shared__ double scratch[32];
  __shared__ float shared_rest[2];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const float inv_n = scale[c];
    const int s0 = chunk_slots[c], s1 = chunk_slots[c + 1], r0 = chunk_rows[c], r1 = chunk_rows[c + 1];
    double total = 0.0;
    for (int g = s0 + threadIdx.x; g < s1; g += blockDim.x) {
      float q = 0.f;
      for (int i = r0; i < r1; ++i) {
        const int r = row_list[i];
        q += partials[2 * rows + row_offset[r] + (g - s0)] / partials[r * kRowPartials + kRowSum];
      }
      q *= inv_n;
      total += kl_term(teacher[g], q, epsilon);
      a[g] = teacher[g] == -INFINITY ? 0.f : -expf(teacher[g]) / (q + epsilon);
    }
    if (threadIdx.x == 0) {
      float q = 0.f;
      for (int i = r0; i < r1; ++i) {
        const int r = row_list[i];
        q += partials[r * kRowPartials + kRowRest] / partials[r * kRowPartials + kRowSum];
      }
      q *= inv_n;
      total += kl_term(teacher_rest[c], q, epsilon);
      shared_rest[0] = teacher_rest[c] == -INFINITY ? 0.f : -expf(teacher_rest[c]) / (q + epsilon);
    }
    total = block_sum(total, scratch);  // its barriers publish a[] and shared_rest
    const float a_rest = shared_rest[0];
    if (threadIdx.x == 0) chunk_kl[c] = static_cast<float>(total), rest_grad[c] = inv_n * a_rest;
    // Each row's centre sum_u q_u h_u from its own columns.
    for (int i = r0; i < r1; ++i) {
      const int r = row_list[i];
      const float sum = partials[r * kRowPartials + kRowSum];
      const float* columns = partials + 2 * rows + row_offset[r];
      double centre = 0.0;
      for (int g = s0 + threadIdx.x; g < s1; g += blockDim.x) centre += a[g] * columns[g - s0];
      centre = block_sum(centre, scratch);
      if (threadIdx.x == 0) {
        centre += static_cast<double>(a_rest) * partials[r * kRowPartials + kRowRest];
        float* st = row_stats + r * kRowStats;
        st[kStatMax] = global_max[r];
        st[kStatLogSum] = logf(sum);
        st[kStatCentre] = static_cast<float>(centre / sum) * inv_n;
      }
    }
    for (int q = chunk_pre[c] + threadIdx.x; q < chunk_pre[c + 1]; q += blockDim.x) {
      float v = pre_outside[q] * a_rest;
      for (int e = pre_entries[q]; e < pre_entries[q + 1]; ++e) v += pre_weight[e] * a[pre_slot[e]];
      h[q] = v * inv_n;
    }
    __syncthreads();
  }
}

__global__ void reduce_loss_kernel(const float* chunk_kl, int64_t chunks, float factor, float* loss) {
  __shared__ double scratch[32];
  double total = 0.0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) total += chunk_kl[c];
  total = block_sum(total, scratch);
  if (threadIdx.x == 0) *loss = static_cast<float>(total * factor);
}

template <typename TS, typename TO>
__global__ void backward_kernel(const TS* student, const int32_t* row_chunk, const int32_t* chunk_pre,
                                const int32_t* pre_column, const float* h_pre, const float* rest_grad,
                                const float* column_weight, const float* row_stats, const float* grad_output,
                                float factor, float inv_t, bool accumulate, TO* dstudent, int64_t rows, int64_t vocab,
                                bool staged) {
  extern __shared__ int smem[];
  const float coef = *grad_output * factor;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    TO* gr = dstudent + r * vocab;
    const int c = row_chunk[r];
    if (c < 0) {
      if (!accumulate)
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) gr[j] = from_f32<TO>(0.f);
      continue;
    }
    const TS* xs = student + r * vocab;
    const int p0 = chunk_pre[c], count = chunk_pre[c + 1] - p0;
    const int* pre = stage_preimage(pre_column + p0, count, smem, staged);
    const float* st = row_stats + r * kRowStats;
    const float m = st[kStatMax], log_sum = st[kStatLogSum], centre = st[kStatCentre], h_rest = rest_grad[c];
    Cursor cursor;
    // Scalar strided loop: every thread's columns increase, as the cursor needs.
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float z = to_f32(xs[j]) * inv_t;
      const float q = expf((z - m) - log_sum);
      const int at = cursor.find(j, pre, count);
      const float hj = at >= 0 ? h_pre[p0 + at] : column_weight[j] * h_rest;
      const float v = coef * q * (hj - centre);
      gr[j] = from_f32<TO>(accumulate ? to_f32(gr[j]) + v : v);
    }
    __syncthreads();
  }
}

const int32_t* ints(const Tensor& t) {
  return t.data<int32_t>();
}

}  // namespace

void local_stats(const Tensor& student, const ChunkPlan& plan, const ChunkParams& p, Tensor& local_max,
                 Tensor& partials) {
  rc::DeviceGuard guard(device_of(student, "chunk_distillation_loss local_stats"));
  const int64_t rows = student.size(0), vocab = student.size(1);
  if (rows == 0) return;
  const bool staged = plan.max_preimage <= kSharedPreimage;
  const size_t shared = staged ? static_cast<size_t>(plan.max_preimage) * sizeof(int) : 0;
  dispatch_float(student.dtype(), "chunk_distillation_loss (student)", [&](auto ts) {
    using TS = typename decltype(ts)::type;
    local_stats_kernel<TS><<<row_grid(rows), row_threads(vocab, kMaxThreads), shared, rc::current_stream()>>>(
        student.data<TS>(), ints(plan.row_chunk), ints(plan.row_column_offset), ints(plan.chunk_preimage),
        ints(plan.preimage_column), plan.preimage_outside.data<float>(), plan.column_weight.data<float>(),
        ints(plan.chunk_slots), ints(plan.slot_entries), ints(plan.entry_column), plan.entry_weight.data<float>(),
        static_cast<float>(p.inv_temperature), local_max.data<float>(), partials.data<float>(), rows, vocab, staged);
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

void rescale(const ChunkPlan& plan, const Tensor& local_max, const Tensor& global_max, Tensor& partials) {
  rc::DeviceGuard guard(device_of(partials, "chunk_distillation_loss rescale"));
  if (plan.rows == 0) return;
  rescale_kernel<<<grid_for(plan.rows, 256), 256, 0, rc::current_stream()>>>(
      ints(plan.row_chunk), ints(plan.row_column_offset), ints(plan.chunk_slots), local_max.data<float>(),
      global_max.data<float>(), partials.data<float>(), plan.rows);
  RETORT_CUDA_CHECK_LAUNCH();
}

void finish(const ChunkPlan& plan, const ChunkParams& p, const Tensor& global_max, const Tensor& partials,
            Tensor& row_stats, Tensor& preimage_grad, Tensor& chunk_rest_grad, Tensor& chunk_kl,
            Tensor& scratch_slots) {
  rc::DeviceGuard guard(device_of(partials, "chunk_distillation_loss finish"));
  if (plan.chunks == 0) return;
  finish_kernel<<<row_grid(plan.chunks), kChunkThreads, 0, rc::current_stream()>>>(
      ints(plan.row_column_offset), ints(plan.chunk_rows), ints(plan.chunk_row_list), ints(plan.chunk_slots),
      ints(plan.chunk_preimage), plan.preimage_outside.data<float>(), ints(plan.preimage_entries),
      ints(plan.preimage_entry_slot), plan.preimage_entry_weight.data<float>(), plan.teacher_log.data<float>(),
      plan.teacher_log_rest.data<float>(), plan.chunk_scale.data<float>(), global_max.data<float>(),
      partials.data<float>(), static_cast<float>(p.epsilon), row_stats.data<float>(), preimage_grad.data<float>(),
      chunk_rest_grad.data<float>(), chunk_kl.data<float>(), scratch_slots.data<float>(), plan.rows, plan.chunks);
  RETORT_CUDA_CHECK_LAUNCH();
}

void reduce_loss(const Tensor& chunk_kl, double factor, Tensor& loss) {
  rc::DeviceGuard guard(device_of(loss, "chunk_distillation_loss reduce_loss"));
  reduce_loss_kernel<<<1, 1024, 0, rc::current_stream()>>>(chunk_kl.data<float>(), chunk_kl.numel(),
                                                           static_cast<float>(factor), loss.data<float>());
  RETORT_CUDA_CHECK_LAUNCH();
}

void backward(const Tensor& student, const ChunkPlan& plan, const ChunkParams& p, const Tensor& row_stats,
              const Tensor& preimage_grad, const Tensor& chunk_rest_grad, const Tensor& grad_output, double factor,
              bool accumulate, Tensor& dstudent) {
  rc::DeviceGuard guard(device_of(student, "chunk_distillation_loss backward"));
  const int64_t rows = student.size(0), vocab = student.size(1);
  if (rows == 0) return;
  const bool staged = plan.max_preimage <= kSharedPreimage;
  const size_t shared = staged ? static_cast<size_t>(plan.max_preimage) * sizeof(int) : 0;
  // d/dx = (1/T) d/dz.
  const float f = static_cast<float>(factor * p.inv_temperature);
  dispatch_float(student.dtype(), "chunk_distillation_loss backward (student)", [&](auto ts) {
    dispatch_float(dstudent.dtype(), "chunk_distillation_loss backward (gradient)", [&](auto to) {
      using TS = typename decltype(ts)::type;
      using TO = typename decltype(to)::type;
      backward_kernel<TS, TO><<<row_grid(rows), row_threads(vocab, kMaxThreads), shared, rc::current_stream()>>>(
          student.data<TS>(), ints(plan.row_chunk), ints(plan.chunk_preimage), ints(plan.preimage_column),
          preimage_grad.data<float>(), chunk_rest_grad.data<float>(), plan.column_weight.data<float>(),
          row_stats.data<float>(), grad_output.data<float>(), f, static_cast<float>(p.inv_temperature), accumulate,
          dstudent.data<TO>(), rows, vocab, staged);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace retort::losses::kernels::chunk::cuda
