// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The residual stream's update by a product left as float32 partial sums over slices of K (linear_partials) and the
// norm after it, in one launch: a block a row, a 16-byte pack of the row a thread, kept in registers from the first
// read to the last write. It stands where a split-K product's reduction kernel and the add + norm kernel after it
// would run (two launches of a few microseconds each in a decode step, for almost no work).
#include <initializer_list>
#include <limits>

#include "core/kernels/decode_kernels.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kMaxThreads = 1024;
// The partial-sum slices a thread loads at once (ops::kPartialSlices), up to kHoldingThreads threads a row; a wider
// row's block has too few registers a thread for them and takes its slices one after another.
constexpr int kHeldSlices = 4;
constexpr int kHoldingThreads = 256;
enum NormChoice { kNoNorm = 0, kLayerNorm = 1, kRmsNorm = 2 };

template <typename T, typename W, int kNorm, int kHeld>
__global__ void add_partials_norm_kernel(const T* x, const float* partials, int64_t slices, int64_t plane,
                                         const T* bias, const W* norm_weight, const W* norm_bias, T* sum, T* y,
                                         int64_t cols, float eps) {
  __shared__ float scratch[32];
  const int64_t p = threadIdx.x;
  const bool live = p < cols / 8;
  const int64_t at = static_cast<int64_t>(blockIdx.x) * cols + 8 * p;
  float v[8] = {}, w[8] = {}, b[8] = {};
  if (live) {
    if constexpr (kNorm != kNoNorm) {
      load8(norm_weight + 8 * p, w);
      if (kNorm == kLayerNorm && norm_bias) load8(norm_bias + 8 * p, b);
    }
    // Every load is issued before the first sum: the slices are read at once, not one L2 round trip after another
    // (a loop over a run-time count of slices waited for each; the sums keep their order, slice 0 first).
    float parts[kHeld][8], residual[8], more[8];
#pragma unroll
    for (int s = 0; s < kHeld; ++s)
      if (s < slices) load8(partials + s * plane + at, parts[s]);
    load8(x + at, residual);
    if (bias) load8(bias + 8 * p, more);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = parts[0][i];
#pragma unroll
    for (int s = 1; s < kHeld; ++s)
      if (s < slices)
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] += parts[s][i];
    for (int64_t s = kHeld; s < slices; ++s) {
      load8(partials + s * plane + at, parts[0]);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] += parts[0][i];
    }
    if (bias) {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] += more[i];
    }
    // The product's output rounded as stored, then the new residual stream rounded as stored.
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = to_f32(from_f32<T>(residual[i] + to_f32(from_f32<T>(v[i]))));
    store8(sum + at, v);
  }
  if constexpr (kNorm != kNoNorm) {
    const float inv_cols = 1.f / static_cast<float>(cols);
    float mu = 0.f;
    if constexpr (kNorm == kLayerNorm) {
      float t = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) t += v[i];
      mu = block_sum(t, scratch) * inv_cols;
    }
    // The second moment about the mean, from the held values (as the norm kernels take it, a second pass).
    float q = 0.f;
    if (live)
#pragma unroll
      for (int i = 0; i < 8; ++i) q += (v[i] - mu) * (v[i] - mu);
    const float rs = 1.f / sqrtf(block_sum(q, scratch) * inv_cols + eps);
    if (live) {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = (v[i] - mu) * rs * w[i] + b[i];
      store8(y + at, v);
    }
  }
}

template <typename T, typename W>
void launch(const Tensor& x, const Tensor& partials, const Tensor& bias, const RowNorm& norm, Tensor& sum, Tensor& y) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const int threads = static_cast<int>((cols / 8 + 31) / 32 * 32);
  const auto go = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(rows), threads, 0, rc::current_stream()>>>(
        x.data<T>(), partials.data<float>(), partials.size(0), rows * cols, bias.defined() ? bias.data<T>() : nullptr,
        norm.weight.defined() ? norm.weight.data<W>() : nullptr, norm.bias.defined() ? norm.bias.data<W>() : nullptr,
        sum.data<T>(), y.defined() ? y.data<T>() : nullptr, cols, norm.eps);
  };
  switch (norm.kind) {
    case RowNormKind::None:
      threads <= kHoldingThreads ? go(add_partials_norm_kernel<T, W, kNoNorm, kHeldSlices>)
                                 : go(add_partials_norm_kernel<T, W, kNoNorm, 1>);
      break;
    case RowNormKind::LayerNorm:
      threads <= kHoldingThreads ? go(add_partials_norm_kernel<T, W, kLayerNorm, kHeldSlices>)
                                 : go(add_partials_norm_kernel<T, W, kLayerNorm, 1>);
      break;
    case RowNormKind::RmsNorm:
      threads <= kHoldingThreads ? go(add_partials_norm_kernel<T, W, kRmsNorm, kHeldSlices>)
                                 : go(add_partials_norm_kernel<T, W, kRmsNorm, 1>);
      break;
  }
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool add_partials_norm(const Tensor& x, const Tensor& partials, const Tensor& bias, const RowNorm& norm, Tensor& sum,
                       Tensor& y) {
  rc::DeviceGuard guard(device_of(x, "add_partials_norm"));
  const int64_t rows = x.size(0), cols = x.size(1);
  const DType dtype = x.dtype();
  if (dtype != DType::BF16 && dtype != DType::F32) return false;
  if (rows == 0 || cols == 0) return true;
  const DType weights = norm.weight.defined() ? norm.weight.dtype() : dtype;
  if (cols % 8 != 0 || cols / 8 > kMaxThreads || (weights != dtype && weights != DType::F32) ||
      rows > std::numeric_limits<int32_t>::max())
    return false;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &partials, &bias, &norm.weight, &norm.bias, &sum, &y})
    if (t->defined() && !aligned16(t->raw_data())) return false;
  if (dtype == DType::BF16) {
    if (weights == DType::F32)
      launch<bf16, float>(x, partials, bias, norm, sum, y);
    else
      launch<bf16, bf16>(x, partials, bias, norm, sum, y);
  } else {
    launch<float, float>(x, partials, bias, norm, sum, y);
  }
  return true;
}

}  // namespace retort::kernels::cuda
