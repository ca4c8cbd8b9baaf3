// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Cross-entropy with integer targets, one block per row. The forward pass reads each logit once (an online
// max / sum of exp gives the log-sum-exp); the backward pass writes grad_scale * (softmax - onehot) from the
// saved lse in one more pass. Both use 16-byte loads over the aligned middle of every row, so a vocabulary
// of odd size (50257) is not left on the scalar path. A target outside [0, V) that is not ignore_index
// never indexes memory: the kernel records it and the host throws after the launch.
#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kMaxThreads = 512;

template <typename T>
__global__ void cross_entropy_forward_kernel(const T* logits, const int32_t* targets, int ignore_index, float* row_loss,
                                             float* lse, int64_t rows, int64_t vocab, rc::DeviceErrorRecord* errors) {
  __shared__ float scratch[64];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = logits + r * vocab;
    OnlineLse acc;
    visit_row(xr, vocab, [&](int64_t, float v) { acc.add(v); });
    acc = block_lse(acc, scratch);
    if (threadIdx.x != 0) continue;
    const float l = acc.max + logf(acc.sum);
    lse[r] = l;
    const int t = targets[r];
    if (t == ignore_index) {
      row_loss[r] = 0.f;
    } else if (t < 0 || t >= vocab) {
      report_bad_index(errors, t, r);
      row_loss[r] = NAN;
    } else {
      row_loss[r] = l - to_f32(xr[t]);
    }
  }
}

template <typename T, typename TO>
__global__ void cross_entropy_backward_kernel(const T* logits, const int32_t* targets, const float* lse,
                                              int ignore_index, float grad_scale, TO* dlogits, int64_t rows,
                                              int64_t vocab, bool vec, rc::DeviceErrorRecord* errors) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    TO* gr = dlogits + r * vocab;
    int t = targets[r];
    if (t == ignore_index) {
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) gr[j] = from_f32<TO>(0.f);
      continue;
    }
    if (t < 0 || t >= vocab) {
      if (threadIdx.x == 0) report_bad_index(errors, t, r);
      t = -1;  // no one-hot term; the host throws anyway
    }
    const float l = lse[r];
    map_row(logits + r * vocab, gr, vocab, vec, [&](int64_t j, float v) {
      const float p = grad_scale * expf(v - l);
      return j == t ? p - grad_scale : p;
    });
  }
}

void throw_if_bad_target(const char* op, int64_t vocab, int ignore_index) {
  if (auto bad = rc::take_device_error()) {
    fail_input("{}: target {} at row {} is outside the vocabulary of {} (ignore_index is {})", op, bad->value,
               bad->position, vocab, ignore_index);
  }
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int ignore_index, Tensor& row_loss,
                           Tensor& lse) {
  rc::DeviceGuard guard(device_of(logits, "cross_entropy_forward"));
  check(row_loss.dtype() == DType::F32 && lse.dtype() == DType::F32 && targets.dtype() == DType::I32,
        "cross_entropy_forward (CUDA): needs i32 targets and f32 row_loss / lse, got {}, {}, {}", targets.describe(),
        row_loss.describe(), lse.describe());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (rows == 0) return;
  dispatch_float(logits.dtype(), "cross_entropy_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_forward_kernel<T><<<row_grid(rows), row_threads(vocab, kMaxThreads), 0, rc::current_stream()>>>(
        logits.data<T>(), targets.data<int32_t>(), ignore_index, row_loss.data<float>(), lse.data<float>(), rows, vocab,
        rc::device_error_record());
    RETORT_CUDA_CHECK_LAUNCH();
  });
  throw_if_bad_target("cross_entropy_forward", vocab, ignore_index);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int ignore_index,
                            float grad_scale, Tensor& dlogits) {
  rc::DeviceGuard guard(device_of(logits, "cross_entropy_backward"));
  check(lse.dtype() == DType::F32 && targets.dtype() == DType::I32,
        "cross_entropy_backward (CUDA): needs i32 targets and f32 lse, got {}, {}", targets.describe(), lse.describe());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (rows == 0) return;
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&](auto ti) {
    dispatch_float(dlogits.dtype(), "cross_entropy_backward", [&](auto to) {
      using T = typename decltype(ti)::type;
      using TO = typename decltype(to)::type;
      const bool vec = same_misalignment(logits.data<T>(), dlogits.data<TO>());
      cross_entropy_backward_kernel<T, TO>
          <<<row_grid(rows), row_threads(vocab, kMaxThreads), 0, rc::current_stream()>>>(
              logits.data<T>(), targets.data<int32_t>(), lse.data<float>(), ignore_index, grad_scale,
              dlogits.data<TO>(), rows, vocab, vec, rc::device_error_record());
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
  throw_if_bad_target("cross_entropy_backward", vocab, ignore_index);
}

}  // namespace retort::kernels::cuda
