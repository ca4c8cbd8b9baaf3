// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The fused CUDA passes of the vocab-parallel distribution losses (see distribution_kernels.h). local_stats
// reads student and teacher once, one block per row with 16-byte loads where both share a layout: running
// maxima of x' and t' carry S, Z and the divergence's partial along, each rescaled whenever its maximum moves,
// so no second pass is needed. backward reads both once more and writes (or adds) the gradient. rescale and
// finish touch O(rows) values; finish is one block that also reduces the loss and the valid-row count on the
// device, so nothing waits for the host. All arithmetic is float32.
#include "losses/kernels/cuda/row_statistics.cuh"
#include "losses/kernels/distribution_kernels.h"

namespace retort::losses::kernels::distribution::cuda {
namespace {
using namespace ::retort::kernels::cuda::detail;
using cuda_rows::block_partials;
using cuda_rows::RowPartials;

constexpr int kMaxThreads = 512;
constexpr int kFinishThreads = 1024;

template <Kind K, typename TS, typename TT>
__global__ void local_stats_kernel(const TS* student, const TT* teacher, float inv_t, float* local_max, float* partials,
                                   int64_t rows, int64_t vocab, bool vec) {
  __shared__ RowPartials<K> scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    auto acc = RowPartials<K>::empty();
    visit_row2_packs(
        student + r * vocab, teacher + r * vocab, vocab, vec,
        [&](int64_t, float x, float t) { acc.add(x * inv_t, t * inv_t); },
        [&](int64_t, float(&x)[8], float(&t)[8]) {
#pragma unroll
          for (int i = 0; i < 8; ++i) x[i] *= inv_t, t[i] *= inv_t;
          acc.add8(x, t);
        });
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
    if (p.divergence == Kind::ReverseKL) out[kRowCentre] = cross / s;
    total += static_cast<double>(loss_scale * cuda_rows::divergence(p.divergence, mx, mt, log_s, log_z, cross, s, z));
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
    constexpr Kind kind = kReverse ? Kind::ReverseKL : Kind::ForwardKL;  // soft CE: forward KL's gradient
    map_pair_row(student + r * vocab, teacher + r * vocab, gr, vocab, vec, accumulate, [&](float xv, float tv) {
      return cuda_rows::distribution_grad<kind, true>(xv * inv_t, tv * inv_t, mx, log_s, mt, log_z, centre, coef);
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
