// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The fused CUDA passes of the vocab-parallel cross-entropy (see cross_entropy_kernels.h). local_stats reads
// every logit once, one block per row with 16-byte loads: an online max carries sum exp(x - max) and, with
// label smoothing, sum (x - max) along, both rescaled whenever the max moves, so the smoothing sum is taken
// of shifted logits (logits x1000 would cancel catastrophically in sum x - V m). backward reads the logits
// once more and writes (or adds) the gradient. rescale and finish touch O(rows) values; finish is one block
// that also reduces the loss and the valid count on the device, so nothing waits for the host. A target
// outside the global vocabulary is recorded on the device, never used as an index.
#include "losses/kernels/cross_entropy_kernels.h"
#include "losses/kernels/cuda/row_statistics.cuh"

namespace retort::losses::kernels::cuda {
namespace {
using namespace ::retort::kernels::cuda::detail;
using cuda_rows::block_row_stats;
using cuda_rows::RowStats;

constexpr int kMaxThreads = 512;
constexpr int kFinishThreads = 1024;

__device__ __forceinline__ bool owned(int t, const CrossEntropyParams& p, int64_t vocab_local) {
  return t >= p.vocab_start && t < p.vocab_start + vocab_local;
}

template <typename T, bool kShifted>
__global__ void local_stats_kernel(const T* logits, const int32_t* targets, CrossEntropyParams p, float* local_max,
                                   float* partials, int cols, int64_t rows, int64_t vocab,
                                   rc::DeviceErrorRecord* errors) {
  __shared__ RowStats<kShifted> scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = logits + r * vocab;
    auto acc = RowStats<kShifted>::empty();
    visit_row_packs(
        xr, vocab, [&](int64_t, float v) { acc.add(v); }, [&](int64_t, const float(&v)[8]) { acc.add8(v); });
    acc = block_row_stats(acc, scratch);
    if (threadIdx.x != 0) continue;
    const int t = targets[r];
    const bool bad = t != p.ignore_index && (t < 0 || t >= p.vocab_total);
    if (bad) report_bad_index(errors, t, r);
    local_max[r] = acc.max;
    float* out = partials + r * cols;
    out[kSumExp] = acc.sum;
    out[kTargetLogit] = !bad && t != p.ignore_index && owned(t, p, vocab) ? to_f32(xr[t - p.vocab_start]) : 0.f;
    if constexpr (kShifted) out[kShiftedSum] = acc.neg_inf || acc.count == 0 ? -INFINITY : acc.shifted;
  }
}

__global__ void rescale_kernel(const float* local_max, const float* global_max, float vocab_local, float* partials,
                               int cols, int64_t rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (local_max[r] == -INFINITY) continue;  // S_r = 0 already; the shifted sum stays -inf
    const float shift = local_max[r] - global_max[r];
    partials[r * cols + kSumExp] *= expf(shift);
    if (cols > kShiftedSum) partials[r * cols + kShiftedSum] += vocab_local * shift;
  }
}

__global__ void finish_kernel(const float* global_max, const float* partials, int cols, const int32_t* targets,
                              CrossEntropyParams p, float* lse, float* loss, float* denominator, int64_t rows) {
  __shared__ double scratch[32];
  const float s = static_cast<float>(p.smoothing), z = static_cast<float>(p.z_loss);
  const float inv_vocab = 1.f / static_cast<float>(p.vocab_total);
  double total = 0.0, valid = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float* in = partials + r * cols;
    const float m = global_max[r], log_s = logf(in[kSumExp]);
    const float row_lse = m + log_s;
    lse[r] = row_lse;
    if (targets[r] == p.ignore_index) continue;
    valid += 1.0;
    const bool smoothed = cols > kShiftedSum;
    total += cuda_rows::cross_entropy_row_loss(m, log_s, in[kTargetLogit], smoothed ? in[kShiftedSum] : 0.f, s,
                                               inv_vocab, z, smoothed);
  }
  total = block_sum(total, scratch);
  valid = block_sum(valid, scratch);
  if (threadIdx.x == 0) {
    double denom = 1.0;
    if (p.reduction == Reduction::Mean) denom = valid > 0.0 ? valid : 1.0;
    if (p.reduction == Reduction::Normalizer) denom = p.normalizer;
    *loss = static_cast<float>(total / denom);
    *denominator = static_cast<float>(denom);
  }
}

template <typename T, typename TO>
__global__ void backward_kernel(const T* logits, const int32_t* targets, const float* lse, const float* grad_output,
                                const float* denominator, CrossEntropyParams p, bool accumulate, TO* dlogits,
                                int64_t rows, int64_t vocab, bool vec) {
  const float coef = *grad_output / *denominator;
  const float uniform = static_cast<float>(p.smoothing / static_cast<double>(p.vocab_total));
  const float label = static_cast<float>(1.0 - p.smoothing), z2 = 2.f * static_cast<float>(p.z_loss);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    TO* gr = dlogits + r * vocab;
    const int t = targets[r];
    if (t == p.ignore_index) {
      if (!accumulate)
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) gr[j] = from_f32<TO>(0.f);
      continue;
    }
    const int64_t own = owned(t, p, vocab) ? t - p.vocab_start : -1;
    const float l = lse[r], q_scale = 1.f + z2 * l;  // z-loss adds 2 w lse q_j
    auto grad = [&](int64_t j, float v) {
      const float q = cuda_rows::exp_shifted(v - l);  // 0 for -inf; v - l first: exact near the top
      return coef * (q * q_scale - uniform - (j == own ? label : 0.f));
    };
    if (accumulate) {
      map_row2(logits + r * vocab, gr, gr, vocab, vec, [&](int64_t j, float v, float g) { return g + grad(j, v); });
    } else {
      map_row(logits + r * vocab, gr, vocab, vec, grad);
    }
  }
}

}  // namespace

void throw_if_bad_target(const CrossEntropyParams& p) {
  if (auto bad = rc::take_device_error()) {
    fail_input(
        "cross_entropy: target {} at row {} is outside the vocabulary of {} (ignore_index is {}): the data and the "
        "model disagree on the vocabulary",
        bad->value, bad->position, p.vocab_total, p.ignore_index);
  }
}

void local_stats(const Tensor& logits, const Tensor& targets, const CrossEntropyParams& p, Tensor& local_max,
                 Tensor& partials) {
  rc::DeviceGuard guard(device_of(logits, "cross_entropy local_stats"));
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const int cols = static_cast<int>(partials.size(1));
  if (rows == 0) return;
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(row_grid(rows)), block(row_threads(vocab, kMaxThreads));
    if (cols > kShiftedSum) {
      local_stats_kernel<T, true><<<grid, block, 0, rc::current_stream()>>>(
          logits.data<T>(), targets.data<int32_t>(), p, local_max.data<float>(), partials.data<float>(), cols, rows,
          vocab, rc::device_error_record());
    } else {
      local_stats_kernel<T, false><<<grid, block, 0, rc::current_stream()>>>(
          logits.data<T>(), targets.data<int32_t>(), p, local_max.data<float>(), partials.data<float>(), cols, rows,
          vocab, rc::device_error_record());
    }
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

void rescale(const Tensor& local_max, const Tensor& global_max, int64_t vocab_local, Tensor& partials) {
  rc::DeviceGuard guard(device_of(partials, "cross_entropy rescale"));
  const int64_t rows = local_max.numel();
  if (rows == 0) return;
  rescale_kernel<<<grid_for(rows, 256), 256, 0, rc::current_stream()>>>(
      local_max.data<float>(), global_max.data<float>(), static_cast<float>(vocab_local), partials.data<float>(),
      static_cast<int>(partials.size(1)), rows);
  RETORT_CUDA_CHECK_LAUNCH();
}

void finish(const Tensor& global_max, const Tensor& partials, const Tensor& targets, const CrossEntropyParams& p,
            Tensor& lse, Tensor& loss, Tensor& denominator) {
  rc::DeviceGuard guard(device_of(partials, "cross_entropy finish"));
  finish_kernel<<<1, kFinishThreads, 0, rc::current_stream()>>>(
      global_max.data<float>(), partials.data<float>(), static_cast<int>(partials.size(1)), targets.data<int32_t>(), p,
      lse.data<float>(), loss.data<float>(), denominator.data<float>(), targets.numel());
  RETORT_CUDA_CHECK_LAUNCH();
}

void backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_output,
              const Tensor& denominator, const CrossEntropyParams& p, bool accumulate, Tensor& dlogits) {
  rc::DeviceGuard guard(device_of(logits, "cross_entropy backward"));
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (rows == 0) return;
  dispatch_float(logits.dtype(), "cross_entropy backward", [&](auto ti) {
    dispatch_float(dlogits.dtype(), "cross_entropy backward", [&](auto to) {
      using T = typename decltype(ti)::type;
      using TO = typename decltype(to)::type;
      const bool vec = same_misalignment(logits.data<T>(), dlogits.data<TO>());
      backward_kernel<T, TO><<<row_grid(rows), row_threads(vocab, kMaxThreads), 0, rc::current_stream()>>>(
          logits.data<T>(), targets.data<int32_t>(), lse.data<float>(), grad_output.data<float>(),
          denominator.data<float>(), p, accumulate, dlogits.data<TO>(), rows, vocab, vec);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace retort::losses::kernels::cuda
