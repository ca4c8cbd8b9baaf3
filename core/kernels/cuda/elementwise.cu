// Elementwise kernels: grid-stride loops over 8-element packs (16-byte accesses) when every pointer is
// 16-byte aligned, a scalar loop for the rest; float32 math whatever the storage dtype.
// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

#include <cmath>
#include <type_traits>

#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace detail {
namespace {

template <typename T>
constexpr bool kPackable = std::is_same_v<T, float> || std::is_same_v<T, bf16>;

constexpr int kThreads = 256;

template <typename TI, typename TO, typename Op>
__global__ void unary_kernel(const TI* in, TO* out, int64_t n, bool vec, Op op) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start = 0;
  if constexpr (kPackable<TI> && kPackable<TO>) {
    if (vec) {
      const int64_t packs = n / 8;
      for (int64_t p = tid; p < packs; p += stride) {
        float v[8];
        load8(in + 8 * p, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = op(v[i]);
        store8(out + 8 * p, v);
      }
      start = packs * 8;
    }
  }
  for (int64_t i = start + tid; i < n; i += stride) out[i] = from_f32<TO>(op(to_f32(in[i])));
}

template <typename TA, typename TB, typename TO, typename Op>
__global__ void binary_kernel(const TA* a, const TB* b, TO* out, int64_t n, bool vec, Op op) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start = 0;
  if (vec) {
    const int64_t packs = n / 8;
    for (int64_t p = tid; p < packs; p += stride) {
      float va[8], vb[8];
      load8(a + 8 * p, va);
      load8(b + 8 * p, vb);
#pragma unroll
      for (int i = 0; i < 8; ++i) va[i] = op(va[i], vb[i]);
      store8(out + 8 * p, va);
    }
    start = packs * 8;
  }
  for (int64_t i = start + tid; i < n; i += stride) out[i] = from_f32<TO>(op(to_f32(a[i]), to_f32(b[i])));
}

template <typename T>
__global__ void fill_kernel(T* x, int64_t n, T value, bool vec) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  constexpr int kPer16 = 16 / sizeof(T);
  int64_t start = 0;
  if (vec) {
    union {
      uint4 raw;
      T elems[kPer16];
    } pattern;
#pragma unroll
    for (int i = 0; i < kPer16; ++i) pattern.elems[i] = value;
    const int64_t packs = n / kPer16;
    for (int64_t p = tid; p < packs; p += stride) reinterpret_cast<uint4*>(x)[p] = pattern.raw;
    start = packs * kPer16;
  }
  for (int64_t i = start + tid; i < n; i += stride) x[i] = value;
}

// One block per row; in vec mode cols is a multiple of 8 so that a pack never straddles two rows.
template <typename TX, typename TB, typename TO>
__global__ void add_bias_kernel(const TX* x, const TB* bias, TO* out, int64_t rows, int64_t cols, bool vec) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TX* xr = x + r * cols;
    TO* outr = out + r * cols;
    if (vec) {
      for (int64_t p = threadIdx.x; p < cols / 8; p += blockDim.x) {
        float vx[8], vb[8];
        load8(xr + 8 * p, vx);
        load8(bias + 8 * p, vb);
#pragma unroll
        for (int i = 0; i < 8; ++i) vx[i] += vb[i];
        store8(outr + 8 * p, vx);
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) outr[c] = from_f32<TO>(to_f32(xr[c]) + to_f32(bias[c]));
    }
  }
}

// Column sums of x [rows, cols] over one chunk of rows per blockIdx.y: a 32 x 8 block covers 32 columns,
// its 8 thread rows stride down the chunk, and the 8 partials are added in a fixed order. With one chunk the
// result goes straight to out; otherwise each chunk's sums go to partial [chunks, cols].
constexpr int kColTile = 32, kRowLanes = 8;

template <typename TX, typename TO>
__global__ void column_sum_kernel(const TX* x, int64_t rows, int64_t cols, int64_t rows_per_chunk, TO* out, float beta,
                                  float* partial) {
  __shared__ float sums[kRowLanes][kColTile + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(rows, r0 + rows_per_chunk);
  float acc = 0.f;
  if (col < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) acc += to_f32(x[r * cols + col]);
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < kRowLanes; ++i) total += sums[i][threadIdx.x];
  if (partial) {
    partial[blockIdx.y * cols + col] = total;
  } else {
    out[col] = from_f32<TO>(beta == 0.f ? total : beta * to_f32(out[col]) + total);
  }
}

struct Scale {
  float s;
  __device__ float operator()(float x) const { return s * x; }
};
struct Identity {
  __device__ float operator()(float x) const { return x; }
};
struct AddScaled {
  float alpha, beta;
  __device__ float operator()(float a, float b) const { return alpha * a + beta * b; }
};
struct Mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};

// GELU with the tanh approximation; tanhf (not a fast approximation) keeps f32 results within 1e-6.
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
struct GeluForward {
  __device__ float operator()(float x) const { return 0.5f * x * (1.f + tanhf(kGeluC * (x + kGeluA * x * x * x))); }
};
struct GeluBackward {
  __device__ float operator()(float x, float dy) const {
    const float t = tanhf(kGeluC * (x + kGeluA * x * x * x));
    const float dt = kGeluC * (1.f + 3.f * kGeluA * x * x);
    return dy * (0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * dt);
  }
};

template <typename Op>
void launch_unary(const Tensor& in, Tensor& out, const char* name, Op op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(in.dtype(), name, [&](auto ti) {
    dispatch_float(out.dtype(), name, [&](auto to) {
      using TI = typename decltype(ti)::type;
      using TO = typename decltype(to)::type;
      const bool vec = aligned16(in.raw_data()) && aligned16(out.raw_data());
      unary_kernel<TI, TO><<<grid_for((vec ? n / 8 : n) + 1, kThreads), kThreads, 0, rc::current_stream()>>>(
          in.data<TI>(), out.data<TO>(), n, vec, op);
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
}

template <typename Op>
void launch_binary(const Tensor& a, const Tensor& b, Tensor& out, const char* name, Op op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(a.dtype(), name, [&](auto ta) {
    dispatch_float(b.dtype(), name, [&](auto tb) {
      dispatch_float(out.dtype(), name, [&](auto to) {
        using TA = typename decltype(ta)::type;
        using TB = typename decltype(tb)::type;
        using TO = typename decltype(to)::type;
        const bool vec = aligned16(a.raw_data()) && aligned16(b.raw_data()) && aligned16(out.raw_data());
        binary_kernel<TA, TB, TO><<<grid_for((vec ? n / 8 : n) + 1, kThreads), kThreads, 0, rc::current_stream()>>>(
            a.data<TA>(), b.data<TB>(), out.data<TO>(), n, vec, op);
        RETORT_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

template <typename TI, typename TO>
void launch_convert(const TI* in, TO* out, int64_t n) {
  const bool vec = aligned16(in) && aligned16(out);
  unary_kernel<TI, TO>
      <<<grid_for((vec ? n / 8 : n) + 1, kThreads), kThreads, 0, rc::current_stream()>>>(in, out, n, vec, Identity{});
  RETORT_CUDA_CHECK_LAUNCH();
}

// Calls fn(TypeTag<T>) for f32, bf16 or i32.
template <typename Fn>
void dispatch_storage(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::I32) {
    fn(TypeTag<int32_t>{});
    return;
  }
  dispatch_float(dtype, op, fn);
}

}  // namespace

void convert(const void* in, DType in_dtype, void* out, DType out_dtype, int64_t n) {
  if (n == 0) return;
  if (in_dtype == out_dtype) {
    RETORT_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<size_t>(n) * dtype_size(in_dtype), cudaMemcpyDeviceToDevice,
                                      rc::current_stream()));
    return;
  }
  dispatch_storage(in_dtype, "cast", [&](auto ti) {
    dispatch_storage(out_dtype, "cast", [&](auto to) {
      using TI = typename decltype(ti)::type;
      using TO = typename decltype(to)::type;
      if constexpr (!std::is_same_v<TI, TO>) launch_convert(static_cast<const TI*>(in), static_cast<TO*>(out), n);
    });
  });
}

void column_sum(const void* x, DType x_dtype, int64_t rows, int64_t cols, void* out, DType out_dtype, float beta) {
  if (cols == 0) return;
  const int64_t col_tiles = (cols + kColTile - 1) / kColTile;
  // Enough chunks to fill the GPU, each at least 64 rows long.
  const int64_t target_blocks = 4LL * sm_count();
  int64_t chunks = std::clamp<int64_t>(target_blocks / col_tiles, 1, std::max<int64_t>(1, (rows + 63) / 64));
  const int64_t rows_per_chunk = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  chunks = std::max<int64_t>(1, (rows + rows_per_chunk - 1) / rows_per_chunk);
  check(col_tiles < (1LL << 31), "column_sum: {} columns are too many", cols);
  const dim3 block(kColTile, kRowLanes);
  cudaStream_t stream = rc::current_stream();
  dispatch_float(out_dtype, "sum_rows", [&](auto to) {
    using TO = typename decltype(to)::type;
    if (chunks == 1) {
      dispatch_float(x_dtype, "sum_rows", [&](auto tx) {
        using TX = typename decltype(tx)::type;
        column_sum_kernel<TX, TO><<<dim3(col_tiles, 1), block, 0, stream>>>(
            static_cast<const TX*>(x), rows, cols, std::max<int64_t>(rows, 1), static_cast<TO*>(out), beta, nullptr);
        RETORT_CUDA_CHECK_LAUNCH();
      });
      return;
    }
    rc::ScratchBuffer partial(static_cast<size_t>(chunks * cols) * sizeof(float));
    float* p = static_cast<float*>(partial.data());
    dispatch_float(x_dtype, "sum_rows", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      column_sum_kernel<TX, TO><<<dim3(col_tiles, chunks), block, 0, stream>>>(
          static_cast<const TX*>(x), rows, cols, rows_per_chunk, static_cast<TO*>(out), beta, p);
      RETORT_CUDA_CHECK_LAUNCH();
    });
    column_sum_kernel<float, TO>
        <<<dim3(col_tiles, 1), block, 0, stream>>>(p, chunks, cols, chunks, static_cast<TO*>(out), beta, nullptr);
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace detail

using namespace detail;

void fill(Tensor& x, double value) {
  rc::DeviceGuard guard(device_of(x, "fill"));
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool vec = aligned16(x.raw_data());
  auto launch = [&](auto* p, auto v) {
    using T = std::remove_pointer_t<decltype(p)>;
    const int64_t per16 = 16 / sizeof(T);
    fill_kernel<T><<<grid_for((vec ? n / per16 : n) + 1, kThreads), kThreads, 0, rc::current_stream()>>>(p, n, v, vec);
    RETORT_CUDA_CHECK_LAUNCH();
  };
  switch (x.dtype()) {
    case DType::F32:
      launch(x.data<float>(), static_cast<float>(value));
      break;
    case DType::BF16:
      launch(x.data<bf16>(), __float2bfloat16_rn(static_cast<float>(value)));
      break;
    case DType::I32:
      launch(x.data<int32_t>(), static_cast<int32_t>(value));
      break;
    default:
      fail("fill (CUDA): {} is not supported on the GPU", x.describe());
  }
}

void cast(const Tensor& x, Tensor& out) {
  rc::DeviceGuard guard(device_of(x, "cast"));
  convert(x.raw_data(), x.dtype(), out.raw_data(), out.dtype(), x.numel());
}

void add(const Tensor& a, const Tensor& b, Tensor& out, float alpha, float beta) {
  rc::DeviceGuard guard(device_of(out, "add"));
  launch_binary(a, b, out, "add", AddScaled{alpha, beta});
}

void add_bias(const Tensor& x, const Tensor& bias, Tensor& out) {
  rc::DeviceGuard guard(device_of(out, "add_bias"));
  const int64_t cols = x.ndim() == 0 ? 1 : x.size(-1);
  if (x.numel() == 0 || cols == 0) return;
  const int64_t rows = x.numel() / cols;
  dispatch_float(x.dtype(), "add_bias", [&](auto tx) {
    dispatch_float(bias.dtype(), "add_bias", [&](auto tb) {
      dispatch_float(out.dtype(), "add_bias", [&](auto to) {
        using TX = typename decltype(tx)::type;
        using TB = typename decltype(tb)::type;
        using TO = typename decltype(to)::type;
        const bool vec = rows_vectorizable(x.raw_data(), cols) && rows_vectorizable(out.raw_data(), cols) &&
                         aligned16(bias.raw_data());
        add_bias_kernel<TX, TB, TO><<<row_grid(rows), row_threads(cols, 256), 0, rc::current_stream()>>>(
            x.data<TX>(), bias.data<TB>(), out.data<TO>(), rows, cols, vec);
        RETORT_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void sum_rows(const Tensor& x, Tensor& out, float beta) {
  rc::DeviceGuard guard(device_of(out, "sum_rows"));
  const int64_t cols = x.ndim() == 0 ? 1 : x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  column_sum(x.raw_data(), x.dtype(), rows, cols, out.raw_data(), out.dtype(), beta);
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  rc::DeviceGuard guard(device_of(out, "mul"));
  launch_binary(a, b, out, "mul", Mul{});
}

void scale(const Tensor& x, float s, Tensor& out) {
  rc::DeviceGuard guard(device_of(out, "scale"));
  launch_unary(x, out, "scale", Scale{s});
}

void gelu_forward(const Tensor& x, Tensor& y) {
  rc::DeviceGuard guard(device_of(y, "gelu_forward"));
  launch_unary(x, y, "gelu_forward", GeluForward{});
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  rc::DeviceGuard guard(device_of(dx, "gelu_backward"));
  launch_binary(x, dy, dx, "gelu_backward", GeluBackward{});
}

}  // namespace retort::kernels::cuda
