// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Causal attention with grouped-query heads, materialising the [T, T] probabilities (they are saved for the
// backward pass anyway). q [B, T, H * D], k and v [B, T, KV * D], each read through its row stride, so the packed
// [B, T, 3C] projections of GPT are the case KV = H with stride 3C. Forward: q, k, v are permuted to head-major
// [B, H, T, D] and [B, KV, T, D]. The g = H / KV query heads of group j are heads j g .. j g + g - 1, contiguous in
// that layout: one batch entry of g T query rows against T keys, so each product is one strided-batched cuBLAS
// call over B KV entries, and the [g T, T] scores of an entry are the [B, H, T, T] probabilities' rows in order
// (query t = row % T). S = Q K^T / sqrt(D) (float32 scores); a masked row softmax writes P; O = P V (float32
// result), permuted back to [B, T, H * D].
// Backward: dP = dO V^T, dS = P * (dP - rowsum(P * dP)) / sqrt(D), dQ = dS K, dK = dS^T Q, dV = P^T dO: the last
// two contract over the g T rows of an entry, which sums the key/value gradients over the group. All products take
// the storage dtype of q (bf16 stays on the tensor cores) and accumulate in float32; a probs tensor of another
// dtype is converted for the products.
#include <cmath>

#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

// Between a [B, T, row_stride] tensor whose H heads of D sit at columns h D and the head-major layout
// [B, H, T, D]: one warp per row of D elements, 8-element packs when D, the row stride and both bases allow.
template <typename TI, typename TO, bool kToHeads>
__global__ void permute_kernel(const TI* in, TO* out, int64_t B, int64_t T, int64_t H, int64_t D, int64_t row_stride,
                               bool vec) {
  const int64_t rows = B * H * T;
  const int lane = threadIdx.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t t = r % T;
    const int64_t h = (r / T) % H;
    const int64_t b = r / (T * H);
    const int64_t packed = (b * T + t) * row_stride + h * D;
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

// Batch, positions, query heads, key/value heads, head size.
struct Dims {
  int64_t B, T, H, KV, D;
  int64_t group() const { return H / KV; }
};

// One of q, k, v (or of their gradients) inside a [B, T, row_stride] tensor: where head 0 of row 0 starts.
template <typename P>
struct Part {
  P data;
  int64_t row_stride;
};
using In = Part<const void*>;
using Out = Part<void*>;

// A [B, T, row_stride] part with `heads` heads to head-major [B, heads, T, D], or back.
template <bool kToHeads>
void permute(const void* in, DType in_dtype, void* out, DType out_dtype, const Dims& d, int64_t heads,
             int64_t row_stride) {
  const int64_t rows = d.B * heads * d.T;
  if (rows == 0 || d.D == 0) return;
  const dim3 block(32, 8);
  const unsigned grid = static_cast<unsigned>(std::clamp<int64_t>((rows + 7) / 8, 1, int64_t{1} << 20));
  const bool vec = d.D % 8 == 0 && row_stride % 8 == 0 && aligned16(in) && aligned16(out);
  dispatch_float(in_dtype, "attention", [&](auto ti) {
    dispatch_float(out_dtype, "attention", [&](auto to) {
      using TI = typename decltype(ti)::type;
      using TO = typename decltype(to)::type;
      permute_kernel<TI, TO, kToHeads><<<grid, block, 0, rc::current_stream()>>>(
          static_cast<const TI*>(in), static_cast<TO*>(out), d.B, d.T, heads, d.D, row_stride, vec);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

// The head-major copies of q, k, v in the compute dtype, one buffer.
struct Heads {
  rc::ScratchBuffer buffer;
  const char *q, *k, *v;
  Heads(const In& q_in, const In& k_in, const In& v_in, DType ct, const Dims& d)
      : buffer((d.H + 2 * d.KV) * d.B * d.T * d.D * dtype_size(ct)) {
    const size_t cs = dtype_size(ct);
    q = static_cast<const char*>(buffer.data());
    k = q + d.B * d.H * d.T * d.D * cs;
    v = k + d.B * d.KV * d.T * d.D * cs;
    permute<true>(q_in.data, ct, const_cast<char*>(q), ct, d, d.H, q_in.row_stride);
    permute<true>(k_in.data, ct, const_cast<char*>(k), ct, d, d.KV, k_in.row_stride);
    permute<true>(v_in.data, ct, const_cast<char*>(v), ct, d, d.KV, v_in.row_stride);
  }
};

void forward(const In& q_in, const In& k_in, const In& v_in, DType ct, const Dims& d, Tensor& out, Tensor& probs) {
  if (d.B * d.T * d.D == 0) return;
  const DType pt = probs.dtype();
  const int64_t BH = d.B * d.H, entries = d.B * d.KV, g = d.group();
  const int64_t TD = d.T * d.D, TT = d.T * d.T;
  const size_t cs = dtype_size(ct);
  cudaStream_t stream = rc::current_stream();
  const Heads heads(q_in, k_in, v_in, ct, d);

  // Scores in float32 (in place in probs when probs is f32): bf16 scores would cost 2-3 digits in exp().
  std::optional<rc::ScratchBuffer> score_buffer;
  float* scores = pt == DType::F32 ? probs.data<float>() : nullptr;
  if (!scores) scores = static_cast<float*>(score_buffer.emplace(BH * TT * sizeof(float)).data());
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.D)));
  gemm_strided(false, true, g * d.T, d.T, d.D, scale, heads.q, d.D, g * TD, heads.k, d.D, TD, 0.f, scores, d.T, g * TT,
               entries, ct, DType::F32);

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
  gemm_strided(false, false, g * d.T, d.D, d.T, 1.f, p, d.T, g * TT, heads.v, d.D, TD, 0.f, y.data(), d.D, g * TD,
               entries, ct, DType::F32);
  permute<false>(y.data(), DType::F32, out.raw_data(), out.dtype(), d, d.H, d.H * d.D);
}

void backward(const Tensor& dout, const In& q_in, const In& k_in, const In& v_in, DType ct, const Tensor& probs,
              const Dims& d, const Out& dq_out, const Out& dk_out, const Out& dv_out, DType grad_dtype) {
  if (d.B * d.T * d.D == 0) return;
  const DType pt = probs.dtype();
  const int64_t BH = d.B * d.H, entries = d.B * d.KV, g = d.group();
  const int64_t TD = d.T * d.D, TT = d.T * d.T;
  const size_t cs = dtype_size(ct);
  cudaStream_t stream = rc::current_stream();
  const Heads heads(q_in, k_in, v_in, ct, d);
  rc::ScratchBuffer dy(BH * TD * cs);
  permute<true>(dout.raw_data(), dout.dtype(), dy.data(), ct, d, d.H, d.H * d.D);

  std::optional<rc::ScratchBuffer> probs_copy;
  const void* p = probs.raw_data();
  if (pt != ct) {
    p = probs_copy.emplace(BH * TT * cs).data();
    convert(probs.raw_data(), pt, probs_copy->data(), ct, BH * TT);
  }

  rc::ScratchBuffer dp(BH * TT * sizeof(float));
  auto* dpf = static_cast<float*>(dp.data());
  gemm_strided(false, true, g * d.T, d.T, d.D, 1.f, dy.data(), d.D, g * TD, heads.v, d.D, TD, 0.f, dpf, d.T, g * TT,
               entries, ct, DType::F32);

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

  const int64_t kv_elems = entries * TD;
  rc::ScratchBuffer grads((BH * TD + 2 * kv_elems) * sizeof(float));
  auto* dq = static_cast<float*>(grads.data());
  float* dk = dq + BH * TD;
  float* dv = dk + kv_elems;
  gemm_strided(false, false, g * d.T, d.D, d.T, 1.f, ds.data(), d.T, g * TT, heads.k, d.D, TD, 0.f, dq, d.D, g * TD,
               entries, ct, DType::F32);
  // dK and dV contract over the g T query rows of an entry: the sum over the group's heads.
  gemm_strided(true, false, d.T, d.D, g * d.T, 1.f, ds.data(), d.T, g * TT, heads.q, d.D, g * TD, 0.f, dk, d.D, TD,
               entries, ct, DType::F32);
  gemm_strided(true, false, d.T, d.D, g * d.T, 1.f, p, d.T, g * TT, dy.data(), d.D, g * TD, 0.f, dv, d.D, TD, entries,
               ct, DType::F32);
  permute<false>(dq, DType::F32, dq_out.data, grad_dtype, d, d.H, dq_out.row_stride);
  permute<false>(dk, DType::F32, dk_out.data, grad_dtype, d, d.KV, dk_out.row_stride);
  permute<false>(dv, DType::F32, dv_out.data, grad_dtype, d, d.KV, dv_out.row_stride);
}

Dims packed_dims(const Tensor& qkv, int n_head) {
  const int64_t C = qkv.size(2) / 3;
  check(n_head > 0 && C % n_head == 0, "attention (CUDA): width {} does not split into {} heads", C, n_head);
  return {qkv.size(0), qkv.size(1), n_head, n_head, C / n_head};
}

Dims split_dims(const Tensor& q, int n_head, int n_kv_head) {
  check(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 && q.size(2) % n_head == 0,
        "attention (CUDA): {} query heads of width {} do not group into {} key/value heads", n_head, q.size(2),
        n_kv_head);
  return {q.size(0), q.size(1), n_head, n_kv_head, q.size(2) / n_head};
}

// Byte offset of column `col` of a tensor of dtype `dt`.
const void* at(const Tensor& t, int64_t col) {
  return static_cast<const char*>(t.raw_data()) + col * dtype_size(t.dtype());
}
void* at(Tensor& t, int64_t col) {
  return static_cast<char*>(t.raw_data()) + col * dtype_size(t.dtype());
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs) {
  rc::DeviceGuard guard(device_of(qkv, "attention_forward"));
  const Dims d = packed_dims(qkv, n_head);
  const int64_t C = d.H * d.D;
  forward({at(qkv, 0), 3 * C}, {at(qkv, C), 3 * C}, {at(qkv, 2 * C), 3 * C}, qkv.dtype(), d, out, probs);
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head, Tensor& out,
                       Tensor& probs) {
  rc::DeviceGuard guard(device_of(q, "attention_forward"));
  const Dims d = split_dims(q, n_head, n_kv_head);
  forward({q.raw_data(), q.size(2)}, {k.raw_data(), k.size(2)}, {v.raw_data(), v.size(2)}, q.dtype(), d, out, probs);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv) {
  rc::DeviceGuard guard(device_of(qkv, "attention_backward"));
  const Dims d = packed_dims(qkv, n_head);
  const int64_t C = d.H * d.D;
  backward(dout, {at(qkv, 0), 3 * C}, {at(qkv, C), 3 * C}, {at(qkv, 2 * C), 3 * C}, qkv.dtype(), probs, d,
           {at(dqkv, 0), 3 * C}, {at(dqkv, C), 3 * C}, {at(dqkv, 2 * C), 3 * C}, dqkv.dtype());
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        int n_head, int n_kv_head, Tensor& dq, Tensor& dk, Tensor& dv) {
  rc::DeviceGuard guard(device_of(q, "attention_backward"));
  const Dims d = split_dims(q, n_head, n_kv_head);
  backward(dout, {q.raw_data(), q.size(2)}, {k.raw_data(), k.size(2)}, {v.raw_data(), v.size(2)}, q.dtype(), probs, d,
           {dq.raw_data(), dq.size(2)}, {dk.raw_data(), dk.size(2)}, {dv.raw_data(), dv.size(2)}, dq.dtype());
}

}  // namespace retort::kernels::cuda
