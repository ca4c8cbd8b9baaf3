// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The residual stream's update by a product left as float32 partial sums over slices of K (linear_partials) and the
// norm after it, in one launch: a block a row, a 16-byte pack of the row a thread, kept in registers from the first
// read to the last write. It stands where a split-K product's reduction kernel and the add + norm kernel after it
// would run (two launches of a few microseconds each in a decode step, for almost no work).
#include <initializer_list>
#include <limits>

#include "core/kernels/cuda/dependent_launch.cuh"
#include "core/kernels/decode_kernels.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kMaxThreads = 1024;
enum NormChoice { kNoNorm = 0, kLayerNorm = 1, kRmsNorm = 2 };

// The cached rows to move toward L2 (CacheWarmup): `items` (row, key/value head) regions, head_bytes apart, of which
// row b's first starts[b] positions (row_bytes each) are read next.
struct Warmup {
  const char* keys = nullptr;
  const char* values = nullptr;
  const int32_t* starts = nullptr;
  int64_t items = 0, heads = 1, cap = 0, head_bytes = 0, row_bytes = 0;
};

// Spread over every thread of the grid: one (row, head) region a thread, in 32 KiB bulk prefetches. Issued first, so
// that the copies run while this launch and the product after it do.
__device__ __forceinline__ void warm_up(const Warmup& w) {
  constexpr int64_t kPiece = 32 * 1024;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < w.items; item += threads) {
    const int64_t cached = min(max(static_cast<int64_t>(w.starts[item / w.heads]), int64_t{0}), w.cap);
    const int64_t bytes = cached * w.row_bytes, offset = item * w.head_bytes;
    for (int64_t at = 0; at < bytes; at += kPiece) {
      const uint32_t piece = static_cast<uint32_t>(bytes - at < kPiece ? bytes - at : kPiece);
      prefetch_l2(w.keys + offset + at, piece);
      prefetch_l2(w.values + offset + at, piece);
    }
  }
}

template <typename T, typename W, int kNorm>
__global__ void add_partials_norm_kernel(const T* x, const float* partials, int64_t slices, int64_t plane,
                                         const T* bias, const W* norm_weight, const W* norm_bias, T* sum, T* y,
                                         int64_t cols, float eps, Warmup warm) {
  __shared__ float scratch[32];
  if (warm.items > 0) warm_up(warm);
  const int64_t p = threadIdx.x;
  const bool live = p < cols / 8;
  const int64_t at = static_cast<int64_t>(blockIdx.x) * cols + 8 * p;
  float v[8] = {}, w[8] = {}, b[8] = {};
  if (live) {
    if constexpr (kNorm != kNoNorm) {
      load8(norm_weight + 8 * p, w);
      if (kNorm == kLayerNorm && norm_bias) load8(norm_bias + 8 * p, b);
    }
    float more[8], residual[8];
    load8(x + at, residual);
    load8(partials + at, v);
    for (int64_t s = 1; s < slices; ++s) {
      load8(partials + s * plane + at, more);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] += more[i];
    }
    if (bias) {
      load8(bias + 8 * p, more);
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
void launch(const Tensor& x, const Tensor& partials, const Tensor& bias, const RowNorm& norm, Tensor& sum, Tensor& y,
            const Warmup& warm) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const int threads = static_cast<int>((cols / 8 + 31) / 32 * 32);
  const auto go = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(rows), threads, 0, rc::current_stream()>>>(
        x.data<T>(), partials.data<float>(), partials.size(0), rows * cols, bias.defined() ? bias.data<T>() : nullptr,
        norm.weight.defined() ? norm.weight.data<W>() : nullptr, norm.bias.defined() ? norm.bias.data<W>() : nullptr,
        sum.data<T>(), y.defined() ? y.data<T>() : nullptr, cols, norm.eps, warm);
  };
  switch (norm.kind) {
    case RowNormKind::None:
      go(add_partials_norm_kernel<T, W, kNoNorm>);
      break;
    case RowNormKind::LayerNorm:
      go(add_partials_norm_kernel<T, W, kLayerNorm>);
      break;
    case RowNormKind::RmsNorm:
      go(add_partials_norm_kernel<T, W, kRmsNorm>);
      break;
  }
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool add_partials_norm(const Tensor& x, const Tensor& partials, const Tensor& bias, const RowNorm& norm, Tensor& sum,
                       Tensor& y, const CacheWarmup* warmup) {
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
  Warmup warm;
  if (warmup != nullptr && aligned16(warmup->keys.raw_data()) && aligned16(warmup->values.raw_data())) {
    const Tensor& k = warmup->keys;
    warm.keys = static_cast<const char*>(k.raw_data());
    warm.values = static_cast<const char*>(warmup->values.raw_data());
    warm.starts = warmup->starts.data<int32_t>();
    warm.items = k.size(0) * k.size(1);
    warm.heads = k.size(1);
    warm.cap = k.size(2);
    warm.row_bytes = k.size(3) * static_cast<int64_t>(dtype_size(k.dtype()));
    warm.head_bytes = warm.cap * warm.row_bytes;
    // Whole 16-byte pieces only (the bulk prefetch's unit): rows whose size is not a multiple are left cold.
    if (warm.row_bytes % 16 != 0) warm.items = 0;
  }
  if (dtype == DType::BF16) {
    if (weights == DType::F32)
      launch<bf16, float>(x, partials, bias, norm, sum, y, warm);
    else
      launch<bf16, bf16>(x, partials, bias, norm, sum, y, warm);
  } else {
    launch<float, float>(x, partials, bias, norm, sum, y, warm);
  }
  return true;
}

}  // namespace retort::kernels::cuda
