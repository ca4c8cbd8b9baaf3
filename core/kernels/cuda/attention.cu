// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Causal self-attention on packed projections, materialising the [T, T] probabilities (they are saved for
// the backward pass anyway). Forward: q, k, v are permuted from [B, T, 3, H, D] to head-major
// [3, B, H, T, D]; S = Q K^T / sqrt(D) by one strided-batched cuBLAS call (float32 scores); a masked row
// softmax writes P; O = P V by a second call (float32 result), permuted back to [B, T, C].
// Backward: dP = dO V^T, dS = P * (dP - rowsum(P * dP)) / sqrt(D), dQ = dS K, dK = dS^T Q, dV = P^T dO,
// the three gradients permuted into dqkv. All products take the storage dtype of qkv (bf16 stays on the
// tensor cores) and accumulate in float32; a probs tensor of another dtype is converted for the products.
#include <cmath>

#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

// Between the packed layout [B, T, S, H, D] (S = 3 for qkv, S = 1 for a [B, T, C] tensor) and the head-major
// layout [S, B, H, T, D]: one warp per row of D elements, 8-element packs when D and both bases allow.
template <typename TI, typename TO, bool kToHeads>
__global__ void permute_kernel(const TI* in, TO* out, int64_t B, int64_t T, int64_t S, int64_t H, int64_t D, bool vec) {
  const int64_t rows = S * B * H * T;
  const int lane = threadIdx.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t t = r % T;
    int64_t rest = r / T;
    const int64_t h = rest % H;
    rest /= H;
    const int64_t b = rest % B;
    const int64_t s = rest / B;
    const int64_t packed = ((b * T + t) * S + s) * H * D + h * D;
    const int64_t heads = r * D;
    const TI* src = in + (kToHeads ? packed : heads);
    TO* dst = out + (kToHeads ? heads : packed);
    if (vec) {
      for (int64_t p = lane; p < D / 8; p += 32) {
        float v[8];
        load8(src + 8 * p, v);
        store8(dst + 8 * p, v);
      }
    } else {
      for (int64_t d = lane; d < D; d += 32) dst[d] = from_f32<TO>(to_f32(src[d]));
    }
  }
}

// Row r of scores is query t = r % T: keys 0..t take part, later keys get probability 0.
template <typename TP>
__global__ void causal_softmax_kernel(const float* scores, TP* probs, int64_t rows, int64_t T, bool vec) {
  __shared__ float scratch[64];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t valid = r % T + 1;
    const float* sr = scores + r * T;
    OnlineLse acc;
    visit_row(sr, valid, [&](int64_t, float v) { acc.add(v); });
    acc = block_lse(acc, scratch);
    const float m = acc.max, inv = 1.f / acc.sum;
    map_row(sr, probs + r * T, T, vec, [&](int64_t j, float v) { return j < valid ? expf(v - m) * inv : 0.f; });
  }
}

// dS = scale * P * (dP - rowsum(P * dP)); P is 0 above the diagonal, so dS is too.
template <typename TP, typename TS>
__global__ void causal_softmax_backward_kernel(const TP* probs, const float* dprobs, TS* dscores, int64_t rows,
                                               int64_t T, float scale, bool vec) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TP* pr = probs + r * T;
    const float* dpr = dprobs + r * T;
    float dot = 0.f;
    visit_row2(pr, dpr, T, vec, [&](int64_t, float p, float dp) { dot += p * dp; });
    dot = block_sum(dot, scratch);
    map_row2(pr, dpr, dscores + r * T, T, vec, [&](int64_t, float p, float dp) { return scale * p * (dp - dot); });
  }
}

struct Dims {
  int64_t B, T, C, H, D;
};

template <bool kToHeads>
void permute(const void* in, DType in_dtype, void* out, DType out_dtype, const Dims& d, int64_t S) {
  const int64_t rows = S * d.B * d.H * d.T;
  if (rows == 0 || d.D == 0) return;
  const dim3 block(32, 8);
  const unsigned grid = static_cast<unsigned>(std::clamp<int64_t>((rows + 7) / 8, 1, int64_t{1} << 20));
  const bool vec = d.D % 8 == 0 && aligned16(in) && aligned16(out);
  dispatch_float(in_dtype, "attention", [&](auto ti) {
    dispatch_float(out_dtype, "attention", [&](auto to) {
      using TI = typename decltype(ti)::type;
      using TO = typename decltype(to)::type;
      permute_kernel<TI, TO, kToHeads><<<grid, block, 0, rc::current_stream()>>>(
          static_cast<const TI*>(in), static_cast<TO*>(out), d.B, d.T, S, d.H, d.D, vec);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

Dims dims_of(const Tensor& qkv, int n_head) {
  Dims d{qkv.size(0), qkv.size(1), qkv.size(2) / 3, n_head, 0};
  check(n_head > 0 && d.C % n_head == 0, "attention (CUDA): width {} does not split into {} heads", d.C, n_head);
  d.D = d.C / n_head;
  return d;
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs) {
  rc::DeviceGuard guard(device_of(qkv, "attention_forward"));
  const Dims d = dims_of(qkv, n_head);
  if (qkv.numel() == 0) return;
  const DType ct = qkv.dtype(), pt = probs.dtype();
  const int64_t BH = d.B * d.H, TD = d.T * d.D, TT = d.T * d.T;
  const size_t cs = dtype_size(ct);
  cudaStream_t stream = rc::current_stream();

  rc::ScratchBuffer heads(3 * BH * TD * cs);
  permute<true>(qkv.raw_data(), ct, heads.data(), ct, d, 3);
  const char* q = static_cast<const char*>(heads.data());
  const char* k = q + BH * TD * cs;
  const char* v = k + BH * TD * cs;

  // Scores in float32 (in place in probs when probs is f32): bf16 scores would cost 2-3 digits in exp().
  std::optional<rc::ScratchBuffer> score_buffer;
  float* scores = pt == DType::F32 ? probs.data<float>() : nullptr;
  if (!scores) scores = static_cast<float*>(score_buffer.emplace(BH * TT * sizeof(float)).data());
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.D)));
  gemm_strided(false, true, d.T, d.T, d.D, scale, q, d.D, TD, k, d.D, TD, 0.f, scores, d.T, TT, BH, ct, DType::F32);

  dispatch_float(pt, "attention_forward", [&](auto tp) {
    using TP = typename decltype(tp)::type;
    const bool vec = same_misalignment(scores, probs.data<TP>());
    causal_softmax_kernel<TP>
        <<<row_grid(BH * d.T), row_threads(d.T, 256), 0, stream>>>(scores, probs.data<TP>(), BH * d.T, d.T, vec);
    RETORT_CUDA_CHECK_LAUNCH();
  });

  std::optional<rc::ScratchBuffer> probs_copy;
  const void* p = probs.raw_data();
  if (pt != ct) {
    p = probs_copy.emplace(BH * TT * cs).data();
    convert(probs.raw_data(), pt, probs_copy->data(), ct, BH * TT);
  }
  rc::ScratchBuffer y(BH * TD * sizeof(float));
  gemm_strided(false, false, d.T, d.D, d.T, 1.f, p, d.T, TT, v, d.D, TD, 0.f, y.data(), d.D, TD, BH, ct, DType::F32);
  permute<false>(y.data(), DType::F32, out.raw_data(), out.dtype(), d, 1);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv) {
  rc::DeviceGuard guard(device_of(qkv, "attention_backward"));
  const Dims d = dims_of(qkv, n_head);
  if (qkv.numel() == 0) return;
  const DType ct = qkv.dtype(), pt = probs.dtype();
  const int64_t BH = d.B * d.H, TD = d.T * d.D, TT = d.T * d.T;
  const size_t cs = dtype_size(ct);
  cudaStream_t stream = rc::current_stream();

  rc::ScratchBuffer heads(3 * BH * TD * cs);
  permute<true>(qkv.raw_data(), ct, heads.data(), ct, d, 3);
  const char* q = static_cast<const char*>(heads.data());
  const char* k = q + BH * TD * cs;
  const char* v = k + BH * TD * cs;
  rc::ScratchBuffer dy(BH * TD * cs);
  permute<true>(dout.raw_data(), dout.dtype(), dy.data(), ct, d, 1);

  std::optional<rc::ScratchBuffer> probs_copy;
  const void* p = probs.raw_data();
  if (pt != ct) {
    p = probs_copy.emplace(BH * TT * cs).data();
    convert(probs.raw_data(), pt, probs_copy->data(), ct, BH * TT);
  }

  rc::ScratchBuffer dp(BH * TT * sizeof(float));
  auto* dpf = static_cast<float*>(dp.data());
  gemm_strided(false, true, d.T, d.T, d.D, 1.f, dy.data(), d.D, TD, v, d.D, TD, 0.f, dpf, d.T, TT, BH, ct, DType::F32);

  rc::ScratchBuffer ds(BH * TT * cs);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.D)));
  dispatch_float(pt, "attention_backward", [&](auto tp) {
    dispatch_float(ct, "attention_backward", [&](auto ts) {
      using TP = typename decltype(tp)::type;
      using TS = typename decltype(ts)::type;
      const auto* pp = probs.data<TP>();
      auto* dsp = static_cast<TS*>(ds.data());
      const bool vec = same_misalignment(pp, static_cast<const float*>(dpf), static_cast<const TS*>(dsp));
      causal_softmax_backward_kernel<TP, TS>
          <<<row_grid(BH * d.T), row_threads(d.T, 256), 0, stream>>>(pp, dpf, dsp, BH * d.T, d.T, scale, vec);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });

  rc::ScratchBuffer grads(3 * BH * TD * sizeof(float));
  auto* dq = static_cast<float*>(grads.data());
  float* dk = dq + BH * TD;
  float* dv = dk + BH * TD;
  gemm_strided(false, false, d.T, d.D, d.T, 1.f, ds.data(), d.T, TT, k, d.D, TD, 0.f, dq, d.D, TD, BH, ct, DType::F32);
  gemm_strided(true, false, d.T, d.D, d.T, 1.f, ds.data(), d.T, TT, q, d.D, TD, 0.f, dk, d.D, TD, BH, ct, DType::F32);
  gemm_strided(true, false, d.T, d.D, d.T, 1.f, p, d.T, TT, dy.data(), d.D, TD, 0.f, dv, d.D, TD, BH, ct, DType::F32);
  permute<false>(grads.data(), DType::F32, dqkv.raw_data(), dqkv.dtype(), d, 3);
}

}  // namespace retort::kernels::cuda
