// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The fused CUDA passes of the vocab-parallel distribution losses (see distribution_kernels.h). local_stats
// reads student and teacher once, one block per row with 16-byte loads where both share a layout: running
// maxima of x' and t' carry S, Z and the divergence's partial along, each rescaled whenever its maximum moves,
// so no second pass is needed. backward reads both once more and writes (or adds) the gradient. rescale and
// finish touch O(rows) values; finish is one block that also reduces the loss and the valid-row count on the
// device, so nothing waits for the host. All arithmetic is float32.
#include "losses/kernels/distribution_kernels.h"

namespace retort::losses::kernels::distribution::cuda {
namespace {
using namespace ::retort::kernels::cuda::detail;

constexpr int kMaxThreads = 512;
constexpr int kFinishThreads = 1024;

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
    const float ex = x_in ? expf(x - mx) : 0.f, et = t_in ? expf(t - mt) : 0.f;
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

template <Kind K, typename TS, typename TT>
__global__ void local_stats_kernel(const TS* student, const TT* teacher, float inv_t, float* local_max, float* partials,
                                   int64_t rows, int64_t vocab, bool vec) {
  __shared__ RowPartials<K> scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    auto acc = RowPartials<K>::empty();
    visit_row2(student + r * vocab, teacher + r * vocab, vocab, vec,
               [&](int64_t, float x, float t) { acc.add(x * inv_t, t * inv_t); });
    acc = block_partials(acc, scratch);
    if (threadIdx.x != 0) continue;
    local_max[r * kMaxColumns + kStudentMax] = acc.mx;
    local_max[r * kMaxColumns + kTeacherMax] = acc.mt;
    float* out = partials + r * kPartialColumns;
    out[kStudentSum] = acc.s;
    out[kTeacherSum] = acc.z;
    out[kCross] = acc.infinite ? INFINITY : acc.cross;
  }
}

template <Kind K>
__global__ void rescale_kernel(const float* local_max, const float* global_max, float* partials, int64_t rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float* out = partials + r * kPartialColumns;
    RowPartials<K> v{local_max[r * kMaxColumns + kStudentMax],
                     local_max[r * kMaxColumns + kTeacherMax],
                     out[kStudentSum],
                     out[kTeacherSum],
                     out[kCross],
                     out[kCross] == INFINITY};
    v.rebase(global_max[r * kMaxColumns + kStudentMax], global_max[r * kMaxColumns + kTeacherMax]);
    out[kStudentSum] = v.s;
    out[kTeacherSum] = v.z;
    out[kCross] = v.infinite ? INFINITY : v.cross;
  }
}

__global__ void finish_kernel(const float* global_max, const float* partials, const int32_t* labels,
                              DistributionParams p, float* row_stats, float* loss, float* denominator, int64_t rows) {
  __shared__ double scratch[32];
  const float loss_scale = static_cast<float>(p.loss_scale);
  double total = 0.0, valid = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float mx = global_max[r * kMaxColumns + kStudentMax], mt = global_max[r * kMaxColumns + kTeacherMax];
    const float* in = partials + r * kPartialColumns;
    const float s = in[kStudentSum], z = in[kTeacherSum], cross = in[kCross];
    const float log_s = logf(s), log_z = logf(z);
    float* out = row_stats + r * kRowColumns;
    out[kRowStudentMax] = mx;
    out[kRowStudentLogSum] = log_s;
    out[kRowTeacherMax] = mt;
    out[kRowTeacherLogSum] = log_z;
    out[kRowCentre] = 0.f;
    if (labels != nullptr && labels[r] == p.ignore_index) continue;
    valid += 1.0;
    float divergence = 0.f;
    switch (p.divergence) {
      case Kind::ForwardKL:  // A / Z - lse_t' + lse_x', the maxima subtracted first (they may be large)
        divergence = cross / z + (mx - mt) + (log_s - log_z);
        break;
      case Kind::SoftCrossEntropy:  // E_p[m_x - x'] + log S
        divergence = cross / z + log_s;
        break;
      case Kind::ReverseKL:  // B / S - lse_x' + lse_t'
        out[kRowCentre] = cross / s;
        divergence = cross / s - (mx - mt) - (log_s - log_z);
        break;
    }
    total += static_cast<double>(loss_scale * divergence);
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

// out[j] = f(x[j], t[j]) (or out[j] + f(...) with accumulate) over one row; `vec` only when the three buffers
// share their element size and misalignment (same_misalignment), as map_row2.
template <typename TS, typename TT, typename TO, typename F>
__device__ __forceinline__ void map_pair_row(const TS* xs, const TT* ts, TO* out, int64_t n, bool vec, bool accumulate,
                                             F&& f) {
  auto one = [&](int64_t j) {
    const float v = f(to_f32(xs[j]), to_f32(ts[j]));
    out[j] = from_f32<TO>(accumulate ? to_f32(out[j]) + v : v);
  };
  const int64_t head = vec ? head_elems(xs, n) : n;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) one(j);
  if (!vec) return;
  const int64_t packs = (n - head) / 8;
  for (int64_t q = threadIdx.x; q < packs; q += blockDim.x) {
    const int64_t at = head + 8 * q;
    float a[8], b[8], o[8];
    load8(xs + at, a);
    load8(ts + at, b);
    if (accumulate) load8(out + at, o);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float v = f(a[i], b[i]);
      o[i] = accumulate ? o[i] + v : v;
    }
    store8(out + at, o);
  }
  for (int64_t j = head + 8 * packs + threadIdx.x; j < n; j += blockDim.x) one(j);
}

template <bool kReverse, typename TS, typename TT, typename TO>
__global__ void backward_kernel(const TS* student, const TT* teacher, const int32_t* labels, const float* row_stats,
                                const float* grad_output, const float* denominator, DistributionParams p,
                                bool accumulate, TO* dstudent, int64_t rows, int64_t vocab, bool vec) {
  // d/dx = (1/T) d/dx': the chain rule through x / T, against the loss's T^2 (or 1).
  const float coef = *grad_output / *denominator * static_cast<float>(p.loss_scale * p.inv_temperature);
  const float inv_t = static_cast<float>(p.inv_temperature);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    TO* gr = dstudent + r * vocab;
    if (labels != nullptr && labels[r] == p.ignore_index) {
      if (!accumulate)
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) gr[j] = from_f32<TO>(0.f);
      continue;
    }
    const float* st = row_stats + r * kRowColumns;
    const float mx = st[kRowStudentMax], log_s = st[kRowStudentLogSum];
    const float mt = st[kRowTeacherMax], log_z = st[kRowTeacherLogSum], centre = st[kRowCentre];
    map_pair_row(student + r * vocab, teacher + r * vocab, gr, vocab, vec, accumulate, [&](float xv, float tv) {
      const float x = xv * inv_t, t = tv * inv_t;
      // (x' - m) - log S rather than x' - lse: x' - m is exact near the top, where the mass is.
      const float q = expf((x - mx) - log_s);  // exactly 0 for a -inf logit
      if constexpr (kReverse) {
        return q == 0.f ? 0.f : coef * q * ((x - t) - centre);
      } else {
        return coef * (q - expf((t - mt) - log_z));
      }
    });
  }
}

template <typename Fn>
void dispatch_kind(Kind kind, Fn&& fn) {
  switch (kind) {
    case Kind::ForwardKL:
      return fn(std::integral_constant<Kind, Kind::ForwardKL>{});
    case Kind::ReverseKL:
      return fn(std::integral_constant<Kind, Kind::ReverseKL>{});
    case Kind::SoftCrossEntropy:
      return fn(std::integral_constant<Kind, Kind::SoftCrossEntropy>{});
  }
  fail("distribution_loss (CUDA): unknown divergence {}", static_cast<int>(kind));
}

const int32_t* labels_of(const Tensor& labels) {
  return labels.defined() ? labels.data<int32_t>() : nullptr;
}

}  // namespace

void local_stats(const Tensor& student, const Tensor& teacher, const DistributionParams& p, Tensor& local_max,
                 Tensor& partials) {
  rc::DeviceGuard guard(device_of(student, "distribution_loss local_stats"));
  const int64_t rows = student.size(0), vocab = student.size(1);
  if (rows == 0) return;
  dispatch_kind(p.divergence, [&](auto kind) {
    dispatch_float(student.dtype(), "distribution_loss (student)", [&](auto ts) {
      dispatch_float(teacher.dtype(), "distribution_loss (teacher)", [&](auto tt) {
        using TS = typename decltype(ts)::type;
        using TT = typename decltype(tt)::type;
        const bool vec = same_misalignment(student.data<TS>(), teacher.data<TT>());
        local_stats_kernel<decltype(kind)::value, TS, TT>
            <<<row_grid(rows), row_threads(vocab, kMaxThreads), 0, rc::current_stream()>>>(
                student.data<TS>(), teacher.data<TT>(), static_cast<float>(p.inv_temperature), local_max.data<float>(),
                partials.data<float>(), rows, vocab, vec);
        RETORT_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void rescale(const Tensor& local_max, const Tensor& global_max, const DistributionParams& p, Tensor& partials) {
  rc::DeviceGuard guard(device_of(partials, "distribution_loss rescale"));
  const int64_t rows = local_max.size(0);
  if (rows == 0) return;
  dispatch_kind(p.divergence, [&](auto kind) {
    rescale_kernel<decltype(kind)::value><<<grid_for(rows, 256), 256, 0, rc::current_stream()>>>(
        local_max.data<float>(), global_max.data<float>(), partials.data<float>(), rows);
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

void finish(const Tensor& global_max, const Tensor& partials, const Tensor& labels, const DistributionParams& p,
            Tensor& row_stats, Tensor& loss, Tensor& denominator) {
  rc::DeviceGuard guard(device_of(partials, "distribution_loss finish"));
  finish_kernel<<<1, kFinishThreads, 0, rc::current_stream()>>>(
      global_max.data<float>(), partials.data<float>(), labels_of(labels), p, row_stats.data<float>(),
      loss.data<float>(), denominator.data<float>(), global_max.size(0));
  RETORT_CUDA_CHECK_LAUNCH();
}

void backward(const Tensor& student, const Tensor& teacher, const Tensor& labels, const Tensor& row_stats,
              const Tensor& grad_output, const Tensor& denominator, const DistributionParams& p, bool accumulate,
              Tensor& dstudent) {
  rc::DeviceGuard guard(device_of(student, "distribution_loss backward"));
  const int64_t rows = student.size(0), vocab = student.size(1);
  if (rows == 0) return;
  dispatch_float(student.dtype(), "distribution_loss backward (student)", [&](auto ts) {
    dispatch_float(teacher.dtype(), "distribution_loss backward (teacher)", [&](auto tt) {
      dispatch_float(dstudent.dtype(), "distribution_loss backward (gradient)", [&](auto to) {
        using TS = typename decltype(ts)::type;
        using TT = typename decltype(tt)::type;
        using TO = typename decltype(to)::type;
        const bool vec = same_misalignment(student.data<TS>(), teacher.data<TT>(), dstudent.data<TO>());
        auto launch = [&](auto kernel) {
          kernel<<<row_grid(rows), row_threads(vocab, kMaxThreads), 0, rc::current_stream()>>>(
              student.data<TS>(), teacher.data<TT>(), labels_of(labels), row_stats.data<float>(),
              grad_output.data<float>(), denominator.data<float>(), p, accumulate, dstudent.data<TO>(), rows, vocab,
              vec);
          RETORT_CUDA_CHECK_LAUNCH();
        };
        if (p.divergence == Kind::ReverseKL) {
          launch(backward_kernel<true, TS, TT, TO>);
        } else {
          launch(backward_kernel<false, TS, TT, TO>);
        }
      });
    });
  });
}

}  // namespace retort::losses::kernels::distribution::cuda
