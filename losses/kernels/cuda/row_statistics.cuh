#pragma once
// Per-row running statistics of the vocab-parallel losses, shared by their two-pass kernels (cross_entropy.cu,
// distribution.cu) and the one-read kernels (row_resident.cu): each is accumulated element by element, merged
// across threads, warps, blocks and ranks with the same rescaling, so every path computes the same numbers.
// Include after core/kernels/cuda/common.cuh.
#include "losses/kernels/cross_entropy_kernels.h"
#include "losses/kernels/distribution_kernels.h"

namespace retort::losses::kernels::cuda_rows {
using distribution::Kind;

// ---- fast exponentials ------------------------------------------------------------------------------------

constexpr float kLog2e = 1.4426950408889634f;

// 2^x on the special-function unit (one instruction; relative error about 2^-22). The statistics passes are bound
// by instruction issue, not memory (docs/benchmarks.md has the profile), and expf costs about ten instructions.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// e^d for d = x - max <= 0 (the subtraction done first, so it is exact near the top, where the mass is); 0 for
// d = -inf.
__device__ __forceinline__ float exp_shifted(float d) {
  return fast_exp2(d * kLog2e);
}

// Running statistics of a stream of logits, relative to its running max: sum exp(x - max) and (kShifted) sum
// (x - max) over the `count` finite values seen. A -inf value only sets a flag: it adds 0 to the first sum
// and makes the second -inf, and subtracting it from anything would risk -inf - -inf = NaN. No member
// initialisers: a __shared__ array of it must be trivially constructible; start from empty().
template <bool kShifted>
struct RowStats {
  float max;
  float sum;
  float shifted;
  int count;
  int neg_inf;

  __device__ __forceinline__ static RowStats empty() { return {-INFINITY, 0.f, 0.f, 0, 0}; }

  __device__ __forceinline__ void add(float x) {
    if (x == -INFINITY) {
      neg_inf = 1;
      return;
    }
    if (x > max) {
      if (count == 0) {
        sum = 1.f;
      } else {
        const float d = max - x;  // < 0: earlier terms shrink relative to the new max
        sum = sum * exp_shifted(d) + 1.f;
        if constexpr (kShifted) shifted += static_cast<float>(count) * d;
      }
      max = x;
    } else {
      sum += exp_shifted(x - max);
      if constexpr (kShifted) shifted += x - max;
    }
    ++count;
  }

  // Eight values at once: the running max moves at most once per pack (one rescale instead of up to eight
  // branches), then each value costs a subtraction, a multiply and an exponential on the special-function unit.
  // Same numbers as eight add() calls up to the order of the float sums.
  __device__ __forceinline__ void add8(const float (&v)[8]) {
    float m8 = v[0];
#pragma unroll
    for (int i = 1; i < 8; ++i) m8 = fmaxf(m8, v[i]);
    if (m8 == -INFINITY) {  // all eight are -inf (fmaxf skips a NaN; a NaN still reaches the sum below)
      neg_inf = 1;
      if (!(v[0] == -INFINITY && v[1] == -INFINITY && v[2] == -INFINITY && v[3] == -INFINITY && v[4] == -INFINITY &&
            v[5] == -INFINITY && v[6] == -INFINITY && v[7] == -INFINITY))
        sum = NAN;
      return;
    }
    if (m8 > max) {
      if (count > 0) {
        const float d = max - m8;
        sum *= exp_shifted(d);
        if constexpr (kShifted) shifted += static_cast<float>(count) * d;
      }
      max = m8;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float d = v[i] - max;
      sum += exp_shifted(d);  // 0 for -inf
      const bool finite = v[i] != -INFINITY;
      if constexpr (kShifted) shifted += finite ? d : 0.f;
      count += finite ? 1 : 0;
      neg_inf |= finite ? 0 : 1;
    }
  }

  __device__ __forceinline__ void merge(const RowStats& o) {
    neg_inf |= o.neg_inf;
    if (o.count == 0) return;
    if (count == 0) {
      max = o.max, sum = o.sum, shifted = o.shifted, count = o.count;
      return;
    }
    const float m = fmaxf(max, o.max), da = max - m, db = o.max - m;
    sum = sum * expf(da) + o.sum * expf(db);
    if constexpr (kShifted)
      shifted = shifted + static_cast<float>(count) * da + o.shifted + static_cast<float>(o.count) * db;
    count += o.count;
    max = m;
  }

  __device__ __forceinline__ RowStats shuffled(int offset) const {
    RowStats o = empty();
    o.max = __shfl_xor_sync(0xffffffffu, max, offset);
    o.sum = __shfl_xor_sync(0xffffffffu, sum, offset);
    if constexpr (kShifted) o.shifted = __shfl_xor_sync(0xffffffffu, shifted, offset);
    o.count = __shfl_xor_sync(0xffffffffu, count, offset);
    o.neg_inf = __shfl_xor_sync(0xffffffffu, neg_inf, offset);
    return o;
  }
};

// The block's statistics, returned to every thread; `scratch` holds one RowStats per warp.
template <bool kShifted>
__device__ __forceinline__ RowStats<kShifted> block_row_stats(RowStats<kShifted> v, RowStats<kShifted>* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v.merge(v.shuffled(o));
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  RowStats<kShifted> total = lane < warps ? scratch[lane] : RowStats<kShifted>::empty();
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) total.merge(total.shuffled(o));
  __syncthreads();  // scratch is reused by the next row
  return total;
}

// One row's running statistics over the logits seen so far, relative to the running maxima mx (of x') and mt
// (of t'): s = sum e^{x' - mx}, z = sum e^{t' - mt}, and the finite part of the divergence's partial:
//   forward KL  sum e^{t' - mt} (t' - x'),  soft CE  sum e^{t' - mt} (mx - x'),  reverse KL  sum e^{x' - mx} (x' - t')
// A term that is +inf (mass against a -inf on the other side) only sets `infinite`: multiplying +inf by a
// rescale factor that underflowed to 0 would make a NaN. A side whose maximum is still -inf has sums 0 and is
// never rescaled (-inf - -inf is NaN). No member initialisers: a __shared__ array of it must be trivially
// constructible; start from empty().
template <Kind K>
struct RowPartials {
  float mx;
  float mt;
  float s;
  float z;
  float cross;
  int infinite;

  __device__ __forceinline__ static RowPartials empty() { return {-INFINITY, -INFINITY, 0.f, 0.f, 0.f, 0}; }

  // Re-expresses the sums relative to maxima new_mx >= mx and new_mt >= mt.
  __device__ __forceinline__ void rebase(float new_mx, float new_mt) {
    const float fx = mx == -INFINITY ? 0.f : expf(mx - new_mx);
    const float ft = mt == -INFINITY ? 0.f : expf(mt - new_mt);
    if constexpr (K == Kind::ForwardKL) cross *= ft;
    if constexpr (K == Kind::ReverseKL) cross *= fx;
    // Each term p_j (mx - x') grows by new_mx - mx >= 0. Teacher mass (z > 0) with no finite student logit has
    // already set `infinite`.
    if constexpr (K == Kind::SoftCrossEntropy)
      cross = z > 0.f && mx != -INFINITY ? (cross + z * (new_mx - mx)) * ft : 0.f;
    s *= fx;
    z *= ft;
    mx = new_mx;
    mt = new_mt;
  }

  __device__ __forceinline__ void add(float x, float t) {
    if (x > mx || t > mt) rebase(fmaxf(mx, x), fmaxf(mt, t));
    const bool x_in = x != -INFINITY, t_in = t != -INFINITY;
    const float ex = x_in ? exp_shifted(x - mx) : 0.f, et = t_in ? exp_shifted(t - mt) : 0.f;
    s += ex;
    z += et;
    if constexpr (K == Kind::ForwardKL) {
      if (t_in && x_in) cross += et * (t - x);
      infinite |= t_in && !x_in;
    } else if constexpr (K == Kind::SoftCrossEntropy) {
      if (t_in && x_in) cross += et * (mx - x);
      infinite |= t_in && !x_in;
    } else {
      if (x_in && t_in) cross += ex * (x - t);
      infinite |= x_in && !t_in;
    }
  }

  // Eight pairs at once: the maxima move at most once per pack, then each pair costs two exponentials on the
  // special-function unit and the partial's term. Same numbers as eight add() calls up to the order of the sums.
  __device__ __forceinline__ void add8(const float (&x)[8], const float (&t)[8]) {
    float m8x = x[0], m8t = t[0];
#pragma unroll
    for (int i = 1; i < 8; ++i) m8x = fmaxf(m8x, x[i]), m8t = fmaxf(m8t, t[i]);
    if (m8x > mx || m8t > mt) rebase(fmaxf(mx, m8x), fmaxf(mt, m8t));
    // A side whose maximum is still -inf has only -inf values so far: measured from 0, each gives e^-inf = 0.
    const float from_x = mx == -INFINITY ? 0.f : mx, from_t = mt == -INFINITY ? 0.f : mt;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool x_in = x[i] != -INFINITY, t_in = t[i] != -INFINITY;
      const float ex = exp_shifted(x[i] - from_x), et = exp_shifted(t[i] - from_t);
      s += ex;
      z += et;
      if constexpr (K == Kind::ForwardKL) {
        cross += t_in && x_in ? et * (t[i] - x[i]) : 0.f;
        infinite |= t_in && !x_in;
      } else if constexpr (K == Kind::SoftCrossEntropy) {
        cross += t_in && x_in ? et * (mx - x[i]) : 0.f;
        infinite |= t_in && !x_in;
      } else {
        cross += x_in && t_in ? ex * (x[i] - t[i]) : 0.f;
        infinite |= x_in && !t_in;
      }
    }
  }

  __device__ __forceinline__ void merge(RowPartials o) {
    infinite |= o.infinite;
    const float new_mx = fmaxf(mx, o.mx), new_mt = fmaxf(mt, o.mt);
    rebase(new_mx, new_mt);
    o.rebase(new_mx, new_mt);
    s += o.s;
    z += o.z;
    cross += o.cross;
  }

  __device__ __forceinline__ RowPartials shuffled(int offset) const {
    RowPartials o;
    o.mx = __shfl_xor_sync(0xffffffffu, mx, offset);
    o.mt = __shfl_xor_sync(0xffffffffu, mt, offset);
    o.s = __shfl_xor_sync(0xffffffffu, s, offset);
    o.z = __shfl_xor_sync(0xffffffffu, z, offset);
    o.cross = __shfl_xor_sync(0xffffffffu, cross, offset);
    o.infinite = __shfl_xor_sync(0xffffffffu, infinite, offset);
    return o;
  }
};

// The block's statistics, returned to every thread; `scratch` holds one RowPartials per warp.
template <Kind K>
__device__ __forceinline__ RowPartials<K> block_partials(RowPartials<K> v, RowPartials<K>* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v.merge(v.shuffled(o));
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  RowPartials<K> total = lane < warps ? scratch[lane] : RowPartials<K>::empty();
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) total.merge(total.shuffled(o));
  __syncthreads();  // scratch is reused by the next row
  return total;
}

// ---- per-row loss and gradient formulas -----------------------------------------------------------------------

// Cross-entropy of one valid row from its global statistics: lse = m + log S, the label's logit, and (with label
// smoothing) the sum of shifted logits sum_j (x_j - m). lse - x_y is taken as (m - x_y) + log S: both are
// logits, so logits x1000 lose nothing to cancellation.
__device__ __forceinline__ float cross_entropy_row_loss(float m, float log_s, float target_logit, float shifted,
                                                        float smoothing, float inv_vocab, float z_loss, bool smoothed) {
  float row = (1.f - smoothing) * ((m - target_logit) + log_s);
  if (smoothed) row -= smoothing * (shifted * inv_vocab - log_s);
  if (z_loss != 0.f) row += z_loss * (m + log_s) * (m + log_s);
  return row;
}

// The divergence of one row from its global statistics (x' and t' already divided by T):
//   forward KL  A / Z - lse_t' + lse_x', the maxima subtracted first (they may be large)
//   soft CE     E_p[m_x - x'] + log S
//   reverse KL  B / S - lse_x' + lse_t'
__device__ __forceinline__ float divergence(Kind kind, float mx, float mt, float log_s, float log_z, float cross,
                                            float s, float z) {
  switch (kind) {
    case Kind::ForwardKL:
      return cross / z + (mx - mt) + (log_s - log_z);
    case Kind::SoftCrossEntropy:
      return cross / z + log_s;
    case Kind::ReverseKL:
      return cross / s - (mx - mt) - (log_s - log_z);
  }
  return NAN;
}

// d loss / d x of one element, x' = x / T and t' = t / T, coef = the loss scale / T / the denominator (times the
// output gradient); centre = E_q[x' - t'] for the reverse KL. (x' - m) - log S rather than x' - lse: x' - m is
// exact near the top, where the mass is. kFast: the exponentials on the special-function unit (exp_shifted).
template <Kind K, bool kFast = false>
__device__ __forceinline__ float distribution_grad(float x, float t, float mx, float log_s, float mt, float log_z,
                                                   float centre, float coef) {
  // e^{d - log_sum}: on the special-function unit as 2^(d L - log_sum L), one fused multiply-add into the exponent.
  auto exp = [](float d, float log_sum) {
    return kFast ? fast_exp2(fmaf(d, kLog2e, -log_sum * kLog2e)) : expf(d - log_sum);
  };
  const float q = exp(x - mx, log_s);  // exactly 0 for a -inf logit
  if constexpr (K == Kind::ReverseKL) {
    return q == 0.f ? 0.f : coef * q * ((x - t) - centre);
  } else {
    return coef * (q - exp(t - mt, log_z));
  }
}

}  // namespace retort::losses::kernels::cuda_rows
