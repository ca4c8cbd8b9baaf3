// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// LayerNorm and RMSNorm over the last dimension: one block per row (rows in a grid-stride loop), float32
// statistics, two passes over the row (the second hits L1/L2). The backward pass gives each block a private
// accumulator row for the weight and bias gradients (shared memory when it fits, else its own slice of a
// global buffer): within a block every column is owned by one thread, so no atomics are needed, and a
// second, deterministic column-sum pass adds the blocks' rows into dweight / dbias.
// The fused residual forms (add_layer_norm, add_rms_norm) ride on the same kernels: the forward first writes the
// row's sum x + r (rounded to the storage dtype) and then normalises the stored sum, reading it back in the same
// thread-to-element order it was written in; the backward adds the residual stream's gathered gradient to dx
// before its one rounding.
#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kMaxThreads = 512;

// residual (may be null): x + residual is written to `sum` and normalised.
template <typename T, typename W, bool kRms, bool kVec>
__global__ void norm_forward_kernel(const T* x, const T* residual, T* sum, const W* weight, const W* bias, T* y,
                                    float* mean, float* rstd, int64_t rows, int64_t cols, float eps) {
  __shared__ float scratch[32];
  const float inv_cols = 1.f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    if (residual) {
      const T* rr = residual + r * cols;
      T* sr = sum + r * cols;
      if constexpr (kVec) {
        for (int64_t p = threadIdx.x; p < cols / 8; p += blockDim.x) {
          float a[8], b[8];
          load8(xr + 8 * p, a);
          load8(rr + 8 * p, b);
#pragma unroll
          for (int i = 0; i < 8; ++i) a[i] += b[i];
          store8(sr + 8 * p, a);
        }
      } else {
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sr[c] = from_f32<T>(to_f32(xr[c]) + to_f32(rr[c]));
      }
      // Every later pass visits the same elements from the same threads, so each reads its own writes.
      xr = sr;
    }
    float mu = 0.f;
    if constexpr (!kRms) {
      float s = 0.f;
      if constexpr (kVec) {
        for (int64_t p = threadIdx.x; p < cols / 8; p += blockDim.x) {
          float v[8];
          load8(xr + 8 * p, v);
#pragma unroll
          for (int i = 0; i < 8; ++i) s += v[i];
        }
      } else {
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += to_f32(xr[c]);
      }
      mu = block_sum(s, scratch) * inv_cols;
    }
    // Second moment about the mean (about 0 for RMSNorm), from a second pass rather than E[x^2] - mu^2.
    float q = 0.f;
    if constexpr (kVec) {
      for (int64_t p = threadIdx.x; p < cols / 8; p += blockDim.x) {
        float v[8];
        load8(xr + 8 * p, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) q += (v[i] - mu) * (v[i] - mu);
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = to_f32(xr[c]) - mu;
        q += d * d;
      }
    }
    const float rs = 1.f / sqrtf(block_sum(q, scratch) * inv_cols + eps);
    if constexpr (kVec) {
      for (int64_t p = threadIdx.x; p < cols / 8; p += blockDim.x) {
        float v[8], w[8], b[8] = {};
        load8(xr + 8 * p, v);
        load8(weight + 8 * p, w);
        if (!kRms && bias) load8(bias + 8 * p, b);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = (v[i] - mu) * rs * w[i] + b[i];
        store8(yr + 8 * p, v);
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float b = !kRms && bias ? to_f32(bias[c]) : 0.f;
        yr[c] = from_f32<T>((to_f32(xr[c]) - mu) * rs * to_f32(weight[c]) + b);
      }
    }
    if (threadIdx.x == 0) {
      if constexpr (!kRms) mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// acc (when not null) points at this block's accumulators: dweight at acc[0, cols), dbias at acc_bias.
// dsum (may be null): a gradient added to dx (the residual stream's, in the fused forms).
template <typename T, typename W, bool kRms, bool kVec>
__global__ void norm_backward_kernel(const T* dy, const T* dsum, const T* x, const W* weight, const float* mean,
                                     const float* rstd, T* dx, float* partial, bool shared_acc, int64_t rows,
                                     int64_t cols) {
  extern __shared__ float4 dynamic_smem[];
  __shared__ float scratch[64];
  float* dw_acc = nullptr;
  float* db_acc = nullptr;
  float* dw_out = nullptr;
  float* db_out = nullptr;
  if (partial) {
    dw_out = partial + blockIdx.x * cols;
    db_out = partial + (gridDim.x + blockIdx.x) * cols;  // unused for RMSNorm
    float* smem = reinterpret_cast<float*>(dynamic_smem);
    dw_acc = shared_acc ? smem : dw_out;
    db_acc = shared_acc ? smem + cols : db_out;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      dw_acc[c] = 0.f;
      if constexpr (!kRms) db_acc[c] = 0.f;
    }
    __syncthreads();
  }
  const float inv_cols = 1.f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const float mu = kRms ? 0.f : mean[r];
    const float rs = rstd[r];
    float2 sums = make_float2(0.f, 0.f);  // sum of g = dy * w, sum of g * xhat
    if constexpr (kVec) {
      for (int64_t p = threadIdx.x; p < cols / 8; p += blockDim.x) {
        float xv[8], gv[8], wv[8];
        load8(xr + 8 * p, xv);
        load8(dyr + 8 * p, gv);
        load8(weight + 8 * p, wv);
        float dw[8], db[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float xhat = (xv[i] - mu) * rs;
          const float g = __fmul_rn(gv[i], wv[i]);  // rounded: pass 2 must see the same g (see below)
          sums.x += g;
          sums.y += g * xhat;
          dw[i] = gv[i] * xhat;
          db[i] = gv[i];
        }
        if (dw_acc) {
          // Two 16-byte accesses per pack keep the shared-memory traffic free of bank conflicts.
          float4* a = reinterpret_cast<float4*>(dw_acc + 8 * p);
          float4 lo = a[0], hi = a[1];
          lo.x += dw[0], lo.y += dw[1], lo.z += dw[2], lo.w += dw[3];
          hi.x += dw[4], hi.y += dw[5], hi.z += dw[6], hi.w += dw[7];
          a[0] = lo, a[1] = hi;
          if constexpr (!kRms) {
            float4* bb = reinterpret_cast<float4*>(db_acc + 8 * p);
            lo = bb[0], hi = bb[1];
            lo.x += db[0], lo.y += db[1], lo.z += db[2], lo.w += db[3];
            hi.x += db[4], hi.y += db[5], hi.z += db[6], hi.w += db[7];
            bb[0] = lo, bb[1] = hi;
          }
        }
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float xhat = (to_f32(xr[c]) - mu) * rs;
        const float d = to_f32(dyr[c]);
        const float g = __fmul_rn(d, to_f32(weight[c]));
        sums.x += g;
        sums.y += g * xhat;
        if (dw_acc) {
          dw_acc[c] += d * xhat;
          if constexpr (!kRms) db_acc[c] += d;
        }
      }
    }
    sums = block_sum2(sums, scratch);
    // g = dy * w is rounded explicitly (__fmul_rn) in both passes: if the compiler fused g - mean_g into an
    // FMA, a row whose g are all equal (one column, say) would give the product's rounding error, amplified
    // by rstd, instead of exactly 0.
    const float mean_g = kRms ? 0.f : sums.x * inv_cols;
    const float mean_gx = sums.y * inv_cols;
    if constexpr (kVec) {
      for (int64_t p = threadIdx.x; p < cols / 8; p += blockDim.x) {
        float xv[8], gv[8], wv[8], sv[8] = {};
        load8(xr + 8 * p, xv);
        load8(dyr + 8 * p, gv);
        load8(weight + 8 * p, wv);
        if (dsum) load8(dsum + r * cols + 8 * p, sv);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float xhat = (xv[i] - mu) * rs;
          xv[i] = rs * (__fmul_rn(gv[i], wv[i]) - mean_g - xhat * mean_gx) + sv[i];
        }
        store8(dxr + 8 * p, xv);
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float xhat = (to_f32(xr[c]) - mu) * rs;
        const float carried = dsum ? to_f32(dsum[r * cols + c]) : 0.f;
        dxr[c] = from_f32<T>(rs * (__fmul_rn(to_f32(dyr[c]), to_f32(weight[c])) - mean_g - xhat * mean_gx) + carried);
      }
    }
  }
  if (partial && shared_acc) {
    __syncthreads();
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      dw_out[c] = dw_acc[c];
      if constexpr (!kRms) db_out[c] = db_acc[c];
    }
  }
}

struct RowShape {
  int64_t rows, cols;
};

RowShape row_shape(const Tensor& x) {
  const int64_t cols = x.ndim() == 0 ? 1 : x.size(-1);
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

// residual and sum: both defined (the fused add + norm) or both undefined.
template <bool kRms>
void norm_forward(const Tensor& x, const Tensor& residual, Tensor& sum, const Tensor& weight, const Tensor& bias,
                  float eps, Tensor& y, Tensor* mean, Tensor& rstd, const char* op) {
  rc::DeviceGuard guard(device_of(x, op));
  check(y.dtype() == x.dtype(), "{} (CUDA): y {} must have the dtype of x {}", op, y.describe(), x.describe());
  check(rstd.dtype() == DType::F32 && (!mean || mean->dtype() == DType::F32),
        "{} (CUDA): per-row statistics must be f32", op);
  check(!bias.defined() || bias.dtype() == weight.dtype(), "{} (CUDA): bias {} and weight {} differ in dtype", op,
        bias.describe(), weight.describe());
  const auto [rows, cols] = row_shape(x);
  if (rows == 0) return;
  const bool fused = residual.defined();
  check(!fused || (residual.dtype() == x.dtype() && sum.dtype() == x.dtype()),
        "{} (CUDA): residual {} and sum {} must have the dtype of x {}", op, residual.describe(), sum.describe(),
        x.describe());
  const bool vec =
      rows_vectorizable(x.raw_data(), cols) && rows_vectorizable(y.raw_data(), cols) && aligned16(weight.raw_data()) &&
      (!bias.defined() || aligned16(bias.raw_data())) &&
      (!fused || (rows_vectorizable(residual.raw_data(), cols) && rows_vectorizable(sum.raw_data(), cols)));
  dispatch_float(x.dtype(), op, [&](auto tx) {
    dispatch_float(weight.dtype(), op, [&](auto tw) {
      using T = typename decltype(tx)::type;
      using W = typename decltype(tw)::type;
      auto kernel = vec ? norm_forward_kernel<T, W, kRms, true> : norm_forward_kernel<T, W, kRms, false>;
      kernel<<<row_grid(rows), row_threads(cols, kMaxThreads), 0, rc::current_stream()>>>(
          x.data<T>(), fused ? residual.data<T>() : nullptr, fused ? sum.data<T>() : nullptr, weight.data<W>(),
          bias.defined() ? bias.data<W>() : nullptr, y.data<T>(), mean ? mean->data<float>() : nullptr,
          rstd.data<float>(), rows, cols, eps);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

// dsum (may be undefined): added to dx.
template <bool kRms>
void norm_backward(const Tensor& dy, const Tensor& dsum, const Tensor& x, const Tensor& weight, const Tensor* mean,
                   const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor* dbias, const char* op) {
  rc::DeviceGuard guard(device_of(x, op));
  check(dy.dtype() == x.dtype() && dx.dtype() == x.dtype(), "{} (CUDA): dy {}, x {} and dx {} must share a dtype", op,
        dy.describe(), x.describe(), dx.describe());
  check(rstd.dtype() == DType::F32 && (!mean || mean->dtype() == DType::F32),
        "{} (CUDA): per-row statistics must be f32", op);
  const auto [rows, cols] = row_shape(x);
  const bool want_dw = dweight.defined();
  const bool want_db = !kRms && dbias && dbias->defined();
  if (rows == 0 || cols == 0) return;
  check(!dsum.defined() || dsum.dtype() == x.dtype(), "{} (CUDA): residual gradient {} must have the dtype of {}", op,
        dsum.describe(), x.describe());
  const bool vec = rows_vectorizable(x.raw_data(), cols) && rows_vectorizable(dy.raw_data(), cols) &&
                   rows_vectorizable(dx.raw_data(), cols) && aligned16(weight.raw_data()) &&
                   (!dsum.defined() || rows_vectorizable(dsum.raw_data(), cols));
  const int threads = row_threads(cols, kMaxThreads);
  const int accumulators = kRms ? 1 : 2;
  const cudaDeviceProp& props = rc::device_properties(rc::current_device());
  cudaStream_t stream = rc::current_stream();
  dispatch_float(x.dtype(), op, [&](auto tx) {
    dispatch_float(weight.dtype(), op, [&](auto tw) {
      using T = typename decltype(tx)::type;
      using W = typename decltype(tw)::type;
      auto kernel = vec ? norm_backward_kernel<T, W, kRms, true> : norm_backward_kernel<T, W, kRms, false>;
      const bool want_grads = want_dw || want_db;
      // The kernel's static shared memory (the reduction scratch) counts against the same limits.
      constexpr size_t kStaticSmem = 64 * sizeof(float);
      size_t smem = want_grads ? static_cast<size_t>(accumulators) * cols * sizeof(float) : 0;
      bool shared_acc = want_grads;
      if (smem + kStaticSmem > props.sharedMemPerBlockOptin) {
        shared_acc = false;  // too wide for shared memory: accumulate in the block's global slice
        smem = 0;
      } else if (smem + kStaticSmem > 48 * 1024) {
        RETORT_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      }
      int per_sm = 0;
      RETORT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
      const int64_t blocks =
          std::clamp<int64_t>(static_cast<int64_t>(std::max(per_sm, 1)) * props.multiProcessorCount, 1, rows);
      std::optional<rc::ScratchBuffer> partial;
      if (want_grads) partial.emplace(static_cast<size_t>(accumulators * blocks * cols) * sizeof(float));
      float* p = want_grads ? static_cast<float*>(partial->data()) : nullptr;
      kernel<<<static_cast<unsigned>(blocks), threads, smem, stream>>>(
          dy.data<T>(), dsum.defined() ? dsum.data<T>() : nullptr, x.data<T>(), weight.data<W>(),
          mean ? mean->data<float>() : nullptr, rstd.data<float>(), dx.data<T>(), p, shared_acc, rows, cols);
      RETORT_CUDA_CHECK_LAUNCH();
      if (want_dw) column_sum(p, DType::F32, blocks, cols, dweight.raw_data(), dweight.dtype(), 1.f);
      if (want_db) column_sum(p + blocks * cols, DType::F32, blocks, cols, dbias->raw_data(), dbias->dtype(), 1.f);
    });
  });
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y, Tensor& mean,
                        Tensor& rstd) {
  Tensor no_sum;
  norm_forward<false>(x, Tensor(), no_sum, weight, bias, eps, y, &mean, rstd, "layer_norm_forward");
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  norm_backward<false>(dy, Tensor(), x, weight, &mean, rstd, dx, dweight, &dbias, "layer_norm_backward");
}

void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  Tensor no_sum;
  norm_forward<true>(x, Tensor(), no_sum, weight, Tensor(), eps, y, nullptr, rstd, "rms_norm_forward");
}

void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                       Tensor& dweight) {
  norm_backward<true>(dy, Tensor(), x, weight, nullptr, rstd, dx, dweight, nullptr, "rms_norm_backward");
}

void add_layer_norm_forward(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, float eps,
                            Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  norm_forward<false>(x, r, sum, weight, bias, eps, y, &mean, rstd, "add_layer_norm_forward");
}

void add_layer_norm_backward(const Tensor& dy, const Tensor& dsum, const Tensor& sum, const Tensor& weight,
                             const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  norm_backward<false>(dy, dsum, sum, weight, &mean, rstd, dx, dweight, &dbias, "add_layer_norm_backward");
}

void add_rms_norm_forward(const Tensor& x, const Tensor& r, const Tensor& weight, float eps, Tensor& sum, Tensor& y,
                          Tensor& rstd) {
  norm_forward<true>(x, r, sum, weight, Tensor(), eps, y, nullptr, rstd, "add_rms_norm_forward");
}

void add_rms_norm_backward(const Tensor& dy, const Tensor& dsum, const Tensor& sum, const Tensor& weight,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight) {
  norm_backward<true>(dy, dsum, sum, weight, nullptr, rstd, dx, dweight, nullptr, "add_rms_norm_backward");
}

}  // namespace retort::kernels::cuda
