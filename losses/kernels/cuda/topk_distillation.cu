// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The fused CUDA passes of the vocab-parallel top-k distillation losses (see topk_distillation_kernels.h). One
// block per row. A row's k teacher ids go to shared memory, where the members this shard owns are sorted by
// column (a rank sort: the ids of a row are distinct); each thread then walks its columns in increasing order
// with a cursor into that sorted list, so "is column j in S, and which slot" costs O(1) amortised per column and
// the rest bucket is a masked sum in the same single read of the shard (16-byte loads in the aligned middle).
// The owned members of S are gathered separately (k reads), with the teacher's statistics over its k values.
// backward reads the shard once more and writes (or adds) the gradient, every column exactly once. rescale and
// finish touch O(rows) values; finish is one block that also reduces the loss and the valid-row count on the
// device, so nothing waits for the host. Arithmetic is float32, except the teacher's logsumexp over S (double:
// log p_rest = log(1 - e^lse) would turn the float rounding of an lse near 0 into a large relative error).
#include "losses/kernels/topk_distillation_kernels.h"
#include "losses/kernels/topk_distillation_row_math.h"

namespace retort::losses::kernels::topk::cuda {
namespace {
using namespace ::retort::kernels::cuda::detail;

constexpr int kMaxThreads = 512;
constexpr int kFinishThreads = 1024;

// The shared-memory scratch of one block: three int arrays of k for the row's members of S, then the
// reduction scratch of the helpers in common.cuh.
struct RowScratch {
  int* column;   // [k] each slot's local column, or -1 where another shard owns it
  int* sorted;   // [count] the owned local columns, increasing
  int* slot_of;  // [count] their slots
};

__host__ size_t shared_bytes(int64_t k) {
  return static_cast<size_t>(3 * k) * sizeof(int);
}

__device__ RowScratch row_scratch(int* smem, int64_t k) {
  return {smem, smem + k, smem + 2 * k};
}

// Finds and sorts the members of S in [start, start + vocab) (a rank sort); returns how many there are, to every
// thread.
__device__ int load_owned(const int32_t* ids, int64_t k, int64_t start, int64_t vocab, RowScratch s, int* int_scratch) {
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    const int64_t c = static_cast<int64_t>(ids[i]) - start;
    s.column[i] = c >= 0 && c < vocab ? static_cast<int>(c) : -1;
  }
  __syncthreads();
  int mine = 0;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    const int c = s.column[i];
    if (c < 0) continue;
    ++mine;
    // Ties (a repeated id, which the host rejects where it can see the ids) get consecutive ranks by slot, so
    // every rank below `count` is written and no thread reads an unset entry.
    int rank = 0;
    for (int64_t j = 0; j < k; ++j) rank += (s.column[j] >= 0 && s.column[j] < c) || (s.column[j] == c && j < i);
    s.sorted[rank] = c;
    s.slot_of[rank] = static_cast<int>(i);
  }
  return block_sum(mine, int_scratch);  // its barrier also publishes the sorted arrays
}

// A thread's position in the sorted members of S; valid while the thread asks for increasing columns, as the
// row visits of common.cuh do (scalar head, packs, scalar tail, each in increasing order).
struct Cursor {
  int at = 0;
  __device__ __forceinline__ int slot(int64_t j, const RowScratch& s, int count) {
    while (at < count && s.sorted[at] < j) ++at;
    return at < count && s.sorted[at] == j ? s.slot_of[at] : -1;
  }
};

template <typename TS, typename TL>
__global__ void local_stats_kernel(const TS* student, const int32_t* indices, const TL* logprobs, const int32_t* labels,
                                   TopkParams p, float* local_max, float* partials, float* row_stats, int64_t rows,
                                   int64_t vocab, int64_t k) {
  extern __shared__ int smem[];
  __shared__ float scratch[64];
  __shared__ double double_scratch[32];
  __shared__ int int_scratch[32];
  const RowScratch s = row_scratch(smem, k);
  const float inv_t = static_cast<float>(p.inv_temperature), ts = static_cast<float>(p.teacher_scale);
  const bool renormalized = p.kind == Kind::ForwardKLRenormalized;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TS* xs = student + r * vocab;
    const TL* ls = logprobs + r * k;
    // The teacher over S: logsumexp of the scaled log-probs (the maximum of floats is exact in float).
    float t_max = -INFINITY;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) t_max = fmaxf(t_max, to_f32(ls[i]) * ts);
    t_max = block_max(t_max, scratch);
    double t_sum = 0;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
      const float l = to_f32(ls[i]) * ts;
      if (l != -INFINITY) t_sum += exp(static_cast<double>(l) - static_cast<double>(t_max));
    }
    t_sum = block_sum(t_sum, double_scratch);
    const double log_mass = t_max == -INFINITY ? -static_cast<double>(INFINITY) : t_max + log(t_sum);
    const float teacher_log_mass = static_cast<float>(log_mass);
    // The members of S this shard owns, gathered.
    const int count = load_owned(indices + r * k, k, p.vocab_start, vocab, s, int_scratch);
    float top_max = -INFINITY;
    for (int a = threadIdx.x; a < count; a += blockDim.x) top_max = fmaxf(top_max, to_f32(xs[s.sorted[a]]) * inv_t);
    top_max = block_max(top_max, scratch);
    float top_sum = 0.f, weight = 0.f, forward = 0.f, reverse = 0.f;
    for (int a = threadIdx.x; a < count; a += blockDim.x) {
      const float z = to_f32(xs[s.sorted[a]]) * inv_t, l = to_f32(ls[s.slot_of[a]]) * ts;
      const float log_w = renormalized ? l - teacher_log_mass : l;
      const float w = expf(log_w);
      const float e = z == -INFINITY ? 0.f : expf(z - top_max);
      top_sum += e;
      weight += w;
      // +inf terms (mass against a -inf on the other side) stay +inf through the sums: no term is -inf.
      if (w > 0.f) forward += z == -INFINITY ? INFINITY : w * (log_w - (z - top_max));
      if (z != -INFINITY) reverse += l == -INFINITY ? INFINITY : e * ((z - top_max) - l);
    }
    const float2 sums_a = block_sum2(make_float2(top_sum, weight), scratch);
    const float2 sums_b = block_sum2(make_float2(forward, reverse), scratch);
    // One read of the shard: the rest bucket (columns not in S) and, for the CE at T != 1, the raw logits.
    OnlineLse rest, raw;
    if (p.scan_columns) {
      Cursor cursor;
      const bool ce_separate = p.ce_separate;
      visit_row(xs, vocab, [&](int64_t j, float x) {
        if (cursor.slot(j, s, count) < 0) rest.add(x * inv_t);
        if (ce_separate) raw.add(x);
      });
      rest = block_lse(rest, scratch);
      raw = block_lse(raw, scratch);
    }
    if (threadIdx.x == 0) {
      float label_logit = 0.f;
      if (uses_ce(p) && labels != nullptr) {
        const int64_t local = static_cast<int64_t>(labels[r]) - p.vocab_start;
        if (local >= 0 && local < vocab) label_logit = to_f32(xs[local]);
      }
      float* mx = local_max + r * kMaxColumns;
      mx[kTopMax] = top_max;
      mx[kRestMax] = rest.max;
      mx[kRawMax] = raw.max;
      float* out = partials + r * kPartialColumns;
      out[kTopSum] = sums_a.x;
      out[kRestSum] = rest.sum;
      out[kTopWeight] = sums_a.y;
      out[kForwardCross] = sums_b.x;
      out[kReverseCross] = sums_b.y;
      out[kRawSum] = raw.sum;
      out[kLabelLogit] = label_logit;
      float* stats = row_stats + r * kRowColumns;
      stats[kRowTeacherLogMass] = teacher_log_mass;
      stats[kRowTeacherLogRest] = static_cast<float>(teacher_log_rest_of(p.kind, log_mass));
    }
    __syncthreads();  // the shared arrays are reused by the next row
  }
}

__global__ void rescale_kernel(const float* local_max, const float* global_max, float* partials, int64_t rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* lm = local_max + r * kMaxColumns;
    const float* gm = global_max + r * kMaxColumns;
    float* out = partials + r * kPartialColumns;
    out[kRestSum] = moved(out[kRestSum], lm[kRestMax], gm[kRestMax]);
    out[kRawSum] = moved(out[kRawSum], lm[kRawMax], gm[kRawMax]);
    const float top_r = lm[kTopMax], top = gm[kTopMax];
    if (top_r == -INFINITY) continue;  // no finite S member here: its top partials are 0 or +inf already
    // w (log w - (z - m_S)) = w (log w - (z - m_S,r)) + w (m_S - m_S,r); the reverse terms likewise, weighted by
    // e^{z - m_S} = e^{z - m_S,r} e^{m_S,r - m_S}.
    const float shift = top - top_r, factor = expf(top_r - top);
    if (!isinf(out[kForwardCross])) out[kForwardCross] += out[kTopWeight] * shift;
    if (!isinf(out[kReverseCross])) out[kReverseCross] = (out[kReverseCross] - out[kTopSum] * shift) * factor;
    out[kTopSum] *= factor;
  }
}

__global__ void finish_kernel(const float* global_max, const float* partials, const int32_t* labels,
                              const int32_t* mask, TopkParams p, float* row_stats, float* loss, float* denominator,
                              int64_t rows) {
  __shared__ double scratch[32];
  const float forward_weight = static_cast<float>(p.forward_weight);
  double total = 0.0, valid = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float* gm = global_max + r * kMaxColumns;
    const float* in = partials + r * kPartialColumns;
    float* stats = row_stats + r * kRowColumns;
    const auto g = RowGlobals<float>::of(gm[kTopMax], gm[kRestMax], in[kTopSum], in[kRestSum]);
    g.store(stats);
    const float log_p_rest = stats[kRowTeacherLogRest];
    float reverse = 0.f;
    if (p.kind == Kind::ReverseKL || p.kind == Kind::Mixed)
      reverse = reverse_divergence(g, in[kReverseCross], in[kTopSum], in[kRestSum], log_p_rest);
    stats[kRowReverse] = reverse;
    stats[kRowRawMax] = p.ce_separate ? gm[kRawMax] : g.max;
    stats[kRowRawLogSum] = p.ce_separate ? logf(in[kRawSum]) : g.log_sum;
    if (mask != nullptr && mask[r] == 0) continue;
    if (labels != nullptr && labels[r] == p.ignore_index) continue;
    valid += 1.0;
    double row = 0.0;
    if (uses_kd(p)) {
      float kd = 0.f;
      switch (p.kind) {
        case Kind::ForwardKLRenormalized:
          kd = renormalized_divergence(g, in[kForwardCross], in[kTopWeight]);
          break;
        case Kind::ForwardKLRest:
          kd = forward_rest_divergence(g, in[kForwardCross], in[kTopWeight], log_p_rest);
          break;
        case Kind::ReverseKL:
          kd = reverse;
          break;
        case Kind::ForwardKLSampled:
          kd = sampled_divergence(g, in[kForwardCross], in[kTopWeight]);
          break;
        case Kind::Mixed:
          kd = forward_weight * forward_rest_divergence(g, in[kForwardCross], in[kTopWeight], log_p_rest) +
               (1.f - forward_weight) * reverse;
          break;
      }
      row += p.kd_ratio * p.loss_scale * static_cast<double>(kd);
    }
    // Cross-entropy on the label at temperature 1: lse_raw - x_y, the maximum subtracted first.
    if (uses_ce(p))
      row += (1.0 - p.kd_ratio) *
             (static_cast<double>(stats[kRowRawMax] - in[kLabelLogit]) + static_cast<double>(stats[kRowRawLogSum]));
    total += row;
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

// out[j] = f(j, x[j]) (or out[j] + f(...) with accumulate) over one row, every column once and, per thread, in
// increasing order (the Cursor relies on it); `vec` only when both buffers share their element size and
// misalignment (same_misalignment).
template <typename TI, typename TO, typename F>
__device__ __forceinline__ void map_row_into(const TI* in, TO* out, int64_t n, bool vec, bool accumulate, F&& f) {
  auto one = [&](int64_t j) {
    const float v = f(j, to_f32(in[j]));
    out[j] = from_f32<TO>(accumulate ? to_f32(out[j]) + v : v);
  };
  const int64_t head = vec ? head_elems(in, n) : n;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) one(j);
  if (!vec) return;
  const int64_t packs = (n - head) / 8;
  for (int64_t q = threadIdx.x; q < packs; q += blockDim.x) {
    const int64_t at = head + 8 * q;
    float a[8], o[8];
    load8(in + at, a);
    if (accumulate) load8(out + at, o);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float v = f(at + i, a[i]);
      o[i] = accumulate ? o[i] + v : v;
    }
    store8(out + at, o);
  }
  for (int64_t j = head + 8 * packs + threadIdx.x; j < n; j += blockDim.x) one(j);
}

template <typename TS, typename TL, typename TO>
__global__ void backward_kernel(const TS* student, const int32_t* indices, const TL* logprobs, const int32_t* labels,
                                const int32_t* mask, const float* row_stats, const float* grad_output,
                                const float* denominator, TopkParams p, bool accumulate, TO* dstudent, int64_t rows,
                                int64_t vocab, int64_t k, bool vec) {
  extern __shared__ int smem[];
  __shared__ int int_scratch[32];
  const RowScratch s = row_scratch(smem, k);
  const float scale = *grad_output / *denominator;
  // d/dx = (1/T) d/dz: the chain rule through z = x / T, against the loss's T^2 (or 1).
  const float c_kd = uses_kd(p) ? scale * static_cast<float>(p.kd_ratio * p.loss_scale * p.inv_temperature) : 0.f;
  const float c_ce = scale * static_cast<float>(1.0 - p.kd_ratio);
  const float inv_t = static_cast<float>(p.inv_temperature);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    TO* gr = dstudent + r * vocab;
    if ((mask != nullptr && mask[r] == 0) || (labels != nullptr && labels[r] == p.ignore_index)) {
      if (!accumulate)
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) gr[j] = from_f32<TO>(0.f);
      continue;
    }
    const float* stats = row_stats + r * kRowColumns;
    const auto row = RowGradient<float>::load(stats, p.kind, static_cast<float>(p.forward_weight),
                                              static_cast<float>(p.teacher_scale));
    const float raw_max = stats[kRowRawMax], raw_log_sum = stats[kRowRawLogSum];
    const int64_t label_local =
        uses_ce(p) && labels != nullptr ? static_cast<int64_t>(labels[r]) - p.vocab_start : int64_t{-1};
    const TL* ls = logprobs + r * k;
    const int count = load_owned(indices + r * k, k, p.vocab_start, vocab, s, int_scratch);
    Cursor cursor;
    map_row_into(student + r * vocab, gr, vocab, vec, accumulate, [&](int64_t j, float x) {
      float v = 0.f;
      if (c_kd != 0.f) {
        const float z = x * inv_t;
        const int slot = cursor.slot(j, s, count);
        v = c_kd * (slot >= 0 ? row.top(z, to_f32(ls[slot])) : row.rest(z));
      }
      // (x - m) - log S rather than x - lse: x - m is exact near the top, where the mass is.
      if (c_ce != 0.f) v += c_ce * (expf((x - raw_max) - raw_log_sum) - (j == label_local ? 1.f : 0.f));
      return v;
    });
    __syncthreads();  // the shared arrays are reused by the next row
  }
}

const int32_t* optional_ints(const Tensor& t) {
  return t.defined() ? t.data<int32_t>() : nullptr;
}

}  // namespace

void local_stats(const Tensor& student, const Tensor& indices, const Tensor& logprobs, const Tensor& labels,
                 const TopkParams& p, Tensor& local_max, Tensor& partials, Tensor& row_stats) {
  rc::DeviceGuard guard(device_of(student, "topk_distillation_loss local_stats"));
  const int64_t rows = student.size(0), vocab = student.size(1), k = indices.size(1);
  if (rows == 0) return;
  check(k <= kMaxTopK, "topk_distillation_loss (CUDA): k = {} is above the kernels' limit {}", k, kMaxTopK);
  dispatch_float(student.dtype(), "topk_distillation_loss (student)", [&](auto ts) {
    dispatch_float(logprobs.dtype(), "topk_distillation_loss (teacher log-probs)", [&](auto tl) {
      using TS = typename decltype(ts)::type;
      using TL = typename decltype(tl)::type;
      local_stats_kernel<TS, TL>
          <<<row_grid(rows), row_threads(vocab, kMaxThreads), shared_bytes(k), rc::current_stream()>>>(
              student.data<TS>(), indices.data<int32_t>(), logprobs.data<TL>(), optional_ints(labels), p,
              local_max.data<float>(), partials.data<float>(), row_stats.data<float>(), rows, vocab, k);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

void rescale(const Tensor& local_max, const Tensor& global_max, Tensor& partials) {
  rc::DeviceGuard guard(device_of(partials, "topk_distillation_loss rescale"));
  const int64_t rows = local_max.size(0);
  if (rows == 0) return;
  rescale_kernel<<<grid_for(rows, 256), 256, 0, rc::current_stream()>>>(
      local_max.data<float>(), global_max.data<float>(), partials.data<float>(), rows);
  RETORT_CUDA_CHECK_LAUNCH();
}

void finish(const Tensor& global_max, const Tensor& partials, const Tensor& labels, const Tensor& mask,
            const TopkParams& p, Tensor& row_stats, Tensor& loss, Tensor& denominator) {
  rc::DeviceGuard guard(device_of(partials, "topk_distillation_loss finish"));
  finish_kernel<<<1, kFinishThreads, 0, rc::current_stream()>>>(
      global_max.data<float>(), partials.data<float>(), optional_ints(labels), optional_ints(mask), p,
      row_stats.data<float>(), loss.data<float>(), denominator.data<float>(), global_max.size(0));
  RETORT_CUDA_CHECK_LAUNCH();
}

void backward(const Tensor& student, const Tensor& indices, const Tensor& logprobs, const Tensor& labels,
              const Tensor& mask, const Tensor& row_stats, const Tensor& grad_output, const Tensor& denominator,
              const TopkParams& p, bool accumulate, Tensor& dstudent) {
  rc::DeviceGuard guard(device_of(student, "topk_distillation_loss backward"));
  const int64_t rows = student.size(0), vocab = student.size(1), k = indices.size(1);
  if (rows == 0) return;
  check(k <= kMaxTopK, "topk_distillation_loss (CUDA): k = {} is above the kernels' limit {}", k, kMaxTopK);
  dispatch_float(student.dtype(), "topk_distillation_loss backward (student)", [&](auto ts) {
    dispatch_float(logprobs.dtype(), "topk_distillation_loss backward (teacher log-probs)", [&](auto tl) {
      dispatch_float(dstudent.dtype(), "topk_distillation_loss backward (gradient)", [&](auto to) {
        using TS = typename decltype(ts)::type;
        using TL = typename decltype(tl)::type;
        using TO = typename decltype(to)::type;
        const bool vec = same_misalignment(student.data<TS>(), dstudent.data<TO>());
        backward_kernel<TS, TL, TO>
            <<<row_grid(rows), row_threads(vocab, kMaxThreads), shared_bytes(k), rc::current_stream()>>>(
                student.data<TS>(), indices.data<int32_t>(), logprobs.data<TL>(), optional_ints(labels),
                optional_ints(mask), row_stats.data<float>(), grad_output.data<float>(), denominator.data<float>(), p,
                accumulate, dstudent.data<TO>(), rows, vocab, k, vec);
        RETORT_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace retort::losses::kernels::topk::cuda
