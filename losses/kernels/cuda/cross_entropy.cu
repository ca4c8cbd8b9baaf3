// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The fused CUDA passes of the vocab-parallel cross-entropy (see cross_entropy_kernels.h). local_stats reads
// every logit once (an online max / sum of exp, the running sum of logits and the owned target logit, one
// block per row, 16-byte loads); backward reads them once more and writes the gradient. rescale and finish
// touch O(rows) values; finish is one block that also reduces the loss and the valid count on the device, so
// nothing waits for the host. A target outside the global vocabulary is recorded on the device and thrown
// after the launch.
#include "losses/kernels/cross_entropy_kernels.h"

namespace retort::losses::kernels::cuda {
namespace {
using namespace ::retort::kernels::cuda::detail;

constexpr int kMaxThreads = 512;
constexpr int kFinishThreads = 1024;

__device__ __forceinline__ bool owned(int t, const CrossEntropyParams& p, int64_t vocab_local) {
  return t >= p.vocab_start && t < p.vocab_start + vocab_local;
}

template <typename T>
__global__ void local_stats_kernel(const T* logits, const int32_t* targets, CrossEntropyParams p, float* local_max,
                                   float* partials, int64_t rows, int64_t vocab, rc::DeviceErrorRecord* errors) {
  __shared__ float scratch[64];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = logits + r * vocab;
    OnlineLse acc;
    float sum_x = 0.f;
    bool any_neg_inf = false;
    visit_row(xr, vocab, [&](int64_t, float v) {
      acc.add(v);
      if (v == -INFINITY)
        any_neg_inf = true;
      else
        sum_x += v;
    });
    acc = block_lse(acc, scratch);
    sum_x = block_sum(sum_x, scratch);
    const bool neg_inf = block_sum(any_neg_inf ? 1.f : 0.f, scratch) > 0.f;
    if (threadIdx.x != 0) continue;
    const int t = targets[r];
    if (t != p.ignore_index && (t < 0 || t >= p.vocab_total)) report_bad_index(errors, t, r);
    local_max[r] = acc.max;
    float* out = partials + r * kPartials;
    out[0] = acc.sum;
    out[1] = t != p.ignore_index && owned(t, p, vocab) ? to_f32(xr[t - p.vocab_start]) : 0.f;
    // sum (x - m_r) over the finite entries; one -inf entry makes the smoothing term -inf (as the math says)
    out[2] = neg_inf || acc.max == -INFINITY ? -INFINITY : sum_x - static_cast<float>(vocab) * acc.max;
  }
}

__global__ void rescale_kernel(const float* local_max, const float* global_max, float vocab_local, float* partials,
                               int64_t rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (local_max[r] == -INFINITY) continue;  // S_r = 0 already; the shifted sum stays -inf
    const float shift = local_max[r] - global_max[r];
    partials[r * kPartials] *= expf(shift);
    partials[r * kPartials + 2] += vocab_local * shift;
  }
}

__global__ void finish_kernel(const float* global_max, const float* partials, const int32_t* targets,
                              CrossEntropyParams p, float* lse, float* loss, float* denominator, int64_t rows) {
  __shared__ float scratch[32];
  float total = 0.f, valid = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float* in = partials + r * kPartials;
    const float log_s = logf(in[0]);
    const float row_lse = global_max[r] + log_s;
    lse[r] = row_lse;
    if (targets[r] == p.ignore_index) continue;
    valid += 1.f;
    float row = (1.f - p.smoothing) * (row_lse - in[1]);
    if (p.smoothing != 0.f) row -= p.smoothing * (in[2] / static_cast<float>(p.vocab_total) - log_s);
    if (p.z_loss != 0.f) row += p.z_loss * row_lse * row_lse;
    total += row;
  }
  total = block_sum(total, scratch);
  valid = block_sum(valid, scratch);
  if (threadIdx.x == 0) {
    float denom = 1.f;
    if (p.reduction == Reduction::Mean) denom = fmaxf(valid, 1.f);
    if (p.reduction == Reduction::Normalizer) denom = p.normalizer;
    *loss = total / denom;
    *denominator = denom;
  }
}

template <typename T, typename TO>
__global__ void backward_kernel(const T* logits, const int32_t* targets, const float* lse, const float* grad_output,
                                const float* denominator, CrossEntropyParams p, bool accumulate, TO* dlogits,
                                int64_t rows, int64_t vocab, bool vec) {
  const float coef = *grad_output / *denominator;
  const float uniform = p.smoothing / static_cast<float>(p.vocab_total), label = 1.f - p.smoothing;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    TO* gr = dlogits + r * vocab;
    const int t = targets[r];
    if (t == p.ignore_index) {
      if (!accumulate)
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) gr[j] = from_f32<TO>(0.f);
      continue;
    }
    const int64_t own = owned(t, p, vocab) ? t - p.vocab_start : -1;
    const float l = lse[r], q_scale = 1.f + 2.f * p.z_loss * l;  // z-loss adds 2 w lse q_j
    auto grad = [&](int64_t j, float v) {
      const float q = expf(v - l);  // exp(-inf) = 0
      return coef * (q * q_scale - uniform - (j == own ? label : 0.f));
    };
    if (accumulate) {
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
        gr[j] = from_f32<TO>(to_f32(gr[j]) + grad(j, to_f32(logits[r * vocab + j])));
    } else {
      map_row(logits + r * vocab, gr, vocab, vec, grad);
    }
  }
}

void throw_if_bad_target(const CrossEntropyParams& p) {
  if (auto bad = rc::take_device_error()) {
    fail_input(
        "cross_entropy: target {} at row {} is outside the vocabulary of {} (ignore_index is {}): the data and the "
        "model disagree on the vocabulary",
        bad->value, bad->position, p.vocab_total, p.ignore_index);
  }
}

}  // namespace

void local_stats(const Tensor& logits, const Tensor& targets, const CrossEntropyParams& p, Tensor& local_max,
                 Tensor& partials) {
  rc::DeviceGuard guard(device_of(logits, "cross_entropy local_stats"));
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (rows == 0) return;
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    local_stats_kernel<T><<<row_grid(rows), row_threads(vocab, kMaxThreads), 0, rc::current_stream()>>>(
        logits.data<T>(), targets.data<int32_t>(), p, local_max.data<float>(), partials.data<float>(), rows, vocab,
        rc::device_error_record());
    RETORT_CUDA_CHECK_LAUNCH();
  });
  throw_if_bad_target(p);
}

void rescale(const Tensor& local_max, const Tensor& global_max, int64_t vocab_local, Tensor& partials) {
  rc::DeviceGuard guard(device_of(partials, "cross_entropy rescale"));
  const int64_t rows = local_max.numel();
  if (rows == 0) return;
  rescale_kernel<<<grid_for(rows, 256), 256, 0, rc::current_stream()>>>(
      local_max.data<float>(), global_max.data<float>(), static_cast<float>(vocab_local), partials.data<float>(), rows);
  RETORT_CUDA_CHECK_LAUNCH();
}

void finish(const Tensor& global_max, const Tensor& partials, const Tensor& targets, const CrossEntropyParams& p,
            Tensor& lse, Tensor& loss, Tensor& denominator) {
  rc::DeviceGuard guard(device_of(partials, "cross_entropy finish"));
  finish_kernel<<<1, kFinishThreads, 0, rc::current_stream()>>>(
      global_max.data<float>(), partials.data<float>(), targets.data<int32_t>(), p, lse.data<float>(),
      loss.data<float>(), denominator.data<float>(), targets.numel());
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
