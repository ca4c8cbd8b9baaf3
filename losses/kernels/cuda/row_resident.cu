// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// The one-read loss-and-gradient kernels (row_resident_kernels.h says why). Layout of one launch:
//   a cluster of C blocks owns one row at a time (rows cluster_id, cluster_id + clusters, ...); block c of the
//   cluster holds columns [c chunk, (c + 1) chunk) of the row in shared memory, twice over (double buffering);
//   thread 0 of each block issues the row's bulk copy (cp.async.bulk, completing on an mbarrier) for the NEXT row
//   before the block works on this one, so the copy engine streams while the SM computes;
//   each block reduces its chunk's statistics (max first, then the sums relative to it, so no exp is spent on
//   rescaling), publishes them in its shared memory, and after a cluster barrier every block merges the C
//   published statistics in the same order (identical bits on every block) and writes its chunk of the gradient
//   straight from shared memory.
// Per-row math is the two-pass kernels' (row_statistics.cuh), so both paths agree to float rounding.
#include <cooperative_groups.h>

#include "losses/kernels/cuda/row_statistics.cuh"
#include "losses/kernels/row_resident_kernels.h"

namespace retort::losses::kernels::row_resident {
namespace {
using namespace ::retort::kernels::cuda::detail;
using cuda_rows::exp_shifted;
using cuda_rows::RowPartials;
using cuda_rows::RowStats;
using distribution::Kind;
namespace cg = cooperative_groups;

constexpr int kThreads = 512;  // several blocks per SM: while one waits at a barrier, the others work
// A block's share of a row: double-buffered up to 32 KiB (three blocks per SM, each streaming its next row while
// it works on this one); wider shares (student plus teacher at 131072 columns) single-buffered up to 100 KiB, the
// blocks sharing an SM overlapping one another instead.
constexpr int64_t kDoubleBufferBytes = 32 * 1024;
constexpr int64_t kMaxBufferBytes = 100 * 1024;
constexpr int kMaxClusterBlocks = 8;  // the portable cluster size

// ---- the copy engine: bulk copies global -> shared that complete on an mbarrier -----------------------------

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
}

// The barrier's initialisation must be visible to the copy engine (the async proxy) before it completes on it.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Orders this block's earlier shared-memory reads before the copy engine overwrites the buffer.
__device__ __forceinline__ void async_proxy_fence() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void barrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}

// bytes: a multiple of 16; src and dst 16-byte aligned.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}

__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(shared_address(bar)), "r"(parity)
                 : "memory");
  }
}

// ---- arithmetic -------------------------------------------------------------------------------------------

// Sums of four floats over the block, returned to every thread; `scratch` holds 32.
__device__ __forceinline__ float4 block_sum4(float4 v, float4* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
    v.z += __shfl_xor_sync(0xffffffffu, v.z, o);
    v.w += __shfl_xor_sync(0xffffffffu, v.w, o);
  }
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float4 total = lane < warps ? scratch[lane] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    total.x += __shfl_xor_sync(0xffffffffu, total.x, o);
    total.y += __shfl_xor_sync(0xffffffffu, total.y, o);
    total.z += __shfl_xor_sync(0xffffffffu, total.z, o);
    total.w += __shfl_xor_sync(0xffffffffu, total.w, o);
  }
  __syncthreads();
  return total;
}

// Per-block reduction space of both policies.
struct Scratch {
  float max[32];
  float4 sums[32];
};

// ---- the kernel skeleton ---------------------------------------------------------------------------------------

// A Policy supplies: Stats (trivially constructible, empty(), merge()), buffer_bytes(chunk),
// copy_row(row, col0, chunk, buffer, bar), block_stats(buffer, chunk, col0, row, scratch) -> Stats for every
// thread, and finish_row(buffer, chunk, col0, row, merged Stats, leader) that writes the gradient chunk (and, for
// the leader, the row's loss).
template <class Policy>
__global__ void __launch_bounds__(kThreads)
    row_resident_kernel(const Policy policy, int64_t rows, int64_t chunk, int buffers) {
  extern __shared__ __align__(128) unsigned char buffer_space[];
  __shared__ __align__(8) uint64_t full[2];
  __shared__ typename Policy::Stats published[2];
  __shared__ Scratch scratch;
  cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.block_rank()), blocks = static_cast<int>(cluster.num_blocks());
  const int64_t clusters = gridDim.x / blocks, first = blockIdx.x / blocks;
  const int64_t col0 = c * chunk;
  const uint32_t buffer_bytes = Policy::buffer_bytes(chunk);
  if (threadIdx.x == 0) {
    barrier_init(&full[0]);
    barrier_init(&full[1]);
    barrier_init_fence();
  }
  __syncthreads();
  auto fetch = [&](int64_t row, int b) {
    async_proxy_fence();
    barrier_expect_bytes(&full[b], buffer_bytes);
    policy.copy_row(row, col0, chunk, buffer_space + b * buffer_bytes, &full[b]);
  };
  if (threadIdx.x == 0 && first < rows) fetch(first, 0);
  int i = 0;
  for (int64_t row = first; row < rows; row += clusters, ++i) {
    const bool doubled = buffers == 2;
    const int b = doubled ? i & 1 : 0;
    // Double-buffered, the next row streams into the other buffer now: that buffer was last read in iteration
    // i - 1, which every thread has left (the barrier at its end).
    if (doubled && threadIdx.x == 0 && row + clusters < rows) fetch(row + clusters, b ^ 1);
    barrier_wait(&full[b], static_cast<uint32_t>(doubled ? (i >> 1) & 1 : i & 1));
    const unsigned char* data = buffer_space + b * buffer_bytes;
    const auto mine = policy.block_stats(data, chunk, col0, row, scratch);
    if (threadIdx.x == 0) published[i & 1] = mine;
    // Slot i & 1 of every block is rewritten only in iteration i + 2, after the next cluster barrier, which every
    // block reaches only once it has merged this row's slots.
    cluster.sync();
    auto merged = Policy::Stats::empty();
    for (int j = 0; j < blocks; ++j) merged.merge(*cluster.map_shared_rank(&published[i & 1], j));
    policy.finish_row(data, chunk, col0, row, merged, c == 0 && threadIdx.x == 0);
    __syncthreads();
    if (!doubled && threadIdx.x == 0 && row + clusters < rows) fetch(row + clusters, 0);
  }
  cluster.sync();  // no block leaves while another may still read its published statistics
}

// How a row is laid out over a cluster: C blocks, columns per block, one or two buffers per block.
struct Shape {
  int blocks = 0;
  int64_t chunk = 0;
  int buffers = 0;
};

// The smallest cluster whose blocks hold 1 / C of a row (bytes_per_column per column) within `limit` bytes.
Shape shape_within(int64_t vocab, int64_t bytes_per_column, int64_t limit, int buffers) {
  for (int c = 1; c <= kMaxClusterBlocks; c *= 2) {
    if (vocab % (8 * c) != 0) continue;
    const int64_t chunk = vocab / c;
    if (chunk * bytes_per_column <= limit) return {c, chunk, buffers};
  }
  return {};
}

Shape shape_for(int64_t vocab, int64_t bytes_per_column) {
  const Shape doubled = shape_within(vocab, bytes_per_column, kDoubleBufferBytes, 2);
  return doubled.blocks > 0 ? doubled : shape_within(vocab, bytes_per_column, kMaxBufferBytes, 1);
}

template <class Policy>
void launch(const Policy& policy, int64_t rows, int64_t vocab, int64_t bytes_per_column) {
  const Shape shape = shape_for(vocab, bytes_per_column);
  check(shape.blocks > 0, "row_resident: vocabulary {} does not fit (supported() was not asked)", vocab);
  const size_t shared = shape.buffers * static_cast<size_t>(Policy::buffer_bytes(shape.chunk));
  auto kernel = row_resident_kernel<Policy>;
  RETORT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(shape.blocks);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = shared;
  config.stream = rc::current_stream();
  config.attrs = &attribute;
  config.numAttrs = 1;
  config.gridDim = dim3(static_cast<unsigned>(shape.blocks));
  int active = 0;
  RETORT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&active, kernel, &config));
  check(active > 0, "row_resident: no cluster of {} blocks with {} bytes of shared memory fits on this GPU",
        shape.blocks, shared);
  const int64_t clusters = std::min<int64_t>(rows, active);
  config.gridDim = dim3(static_cast<unsigned>(clusters * shape.blocks));
  RETORT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, policy, rows, shape.chunk, shape.buffers));
}

// ---- cross-entropy -----------------------------------------------------------------------------------------

// A block's share of a row: the running statistics and, when the block holds the label's column, its logit.
template <bool kShifted>
struct CrossEntropyStats {
  RowStats<kShifted> stats;
  float target;
  int has_target;

  __device__ __forceinline__ static CrossEntropyStats empty() { return {RowStats<kShifted>::empty(), 0.f, 0}; }
  __device__ __forceinline__ void merge(const CrossEntropyStats& o) {
    stats.merge(o.stats);
    if (o.has_target) target = o.target, has_target = 1;
  }
};

template <typename T, typename TO, bool kShifted>
struct CrossEntropyPolicy {
  using Stats = CrossEntropyStats<kShifted>;
  const T* logits;
  const int32_t* targets;
  TO* dlogits;
  float* row_loss;
  const float* denominator;
  rc::DeviceErrorRecord* errors;
  int64_t vocab;
  int ignore_index;
  float smoothing, z_loss;
  bool accumulate;

  __host__ __device__ static uint32_t buffer_bytes(int64_t chunk) { return static_cast<uint32_t>(chunk * sizeof(T)); }

  __device__ void copy_row(int64_t row, int64_t col0, int64_t chunk, unsigned char* buffer, uint64_t* bar) const {
    bulk_copy(buffer, logits + row * vocab + col0, buffer_bytes(chunk), bar);
  }

  __device__ Stats block_stats(const unsigned char* data, int64_t chunk, int64_t col0, int64_t row,
                               Scratch& scratch) const {
    const T* x = reinterpret_cast<const T*>(data);
    const int packs = static_cast<int>(chunk / 8);
    float m = -INFINITY;
    for (int q = threadIdx.x; q < packs; q += blockDim.x) {
      float v[8];
      load8(x + 8 * q, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) m = fmaxf(m, v[k]);
    }
    m = block_max(m, scratch.max);
    // Relative to the block's maximum, known now: no rescaling, one exponential per element. A block of -inf
    // logits has seen nothing (and m - m would be NaN).
    float4 sums = make_float4(0.f, 0.f, 0.f, 0.f);  // sum e^{x - m}, sum (x - m) over finite x, finite count, any -inf
    if (m != -INFINITY) {
      for (int q = threadIdx.x; q < packs; q += blockDim.x) {
        float v[8];
        load8(x + 8 * q, v);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float d = v[k] - m;
          sums.x += exp_shifted(d);
          if constexpr (kShifted) {
            const bool finite = v[k] != -INFINITY;
            sums.y += finite ? d : 0.f;
            sums.z += finite ? 1.f : 0.f;
            sums.w += finite ? 0.f : 1.f;
          }
        }
      }
    } else if constexpr (kShifted) {
      sums.w = chunk > 0 ? 1.f : 0.f;
    }
    sums = block_sum4(sums, scratch.sums);
    auto acc = RowStats<kShifted>::empty();
    acc.max = sums.x > 0.f ? m : -INFINITY;
    acc.sum = sums.x;
    acc.shifted = sums.y;
    // The count only moves the shifted sum between maxima; without smoothing it just marks a block that saw values.
    acc.count = kShifted ? static_cast<int>(sums.z) : (acc.max != -INFINITY ? 1 : 0);  // exact below 2^24
    acc.neg_inf = sums.w > 0.f;
    Stats out = Stats::empty();
    out.stats = acc;
    const int t = targets[row];
    if (t != ignore_index && t >= col0 && t < col0 + chunk) {
      out.target = to_f32(x[t - col0]);
      out.has_target = 1;
    }
    return out;
  }

  __device__ void finish_row(const unsigned char* data, int64_t chunk, int64_t col0, int64_t row, const Stats& g,
                             bool leader) const {
    const T* x = reinterpret_cast<const T*>(data);
    TO* out = dlogits + row * vocab + col0;
    const int t = targets[row];
    const bool bad = t != ignore_index && (t < 0 || t >= vocab);
    if (t == ignore_index || bad) {
      if (leader) {
        row_loss[row] = 0.f;
        if (bad) report_bad_index(errors, t, row);
      }
      if (!accumulate) {
        const float zeros[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int q = threadIdx.x; q < static_cast<int>(chunk / 8); q += blockDim.x) store8(out + 8 * q, zeros);
      }
      return;
    }
    const float m = g.stats.max, log_s = logf(g.stats.sum), lse = m + log_s;
    if (leader) {
      const float shifted = g.stats.neg_inf || g.stats.count == 0 ? -INFINITY : g.stats.shifted;
      row_loss[row] = cuda_rows::cross_entropy_row_loss(m, log_s, g.target, shifted, smoothing,
                                                        1.f / static_cast<float>(vocab), z_loss, kShifted);
    }
    // grad_j = coef (q_j (1 + 2 z lse) - s / V - (1 - s)[j == y]) = a q_j + b - [j == y] c, q_j = 2^((x_j - m) L - log
    // S L): x_j - m first (exact near the top), then one fused multiply-add into the exponent.
    const float coef = 1.f / *denominator;
    const float a = coef * (1.f + 2.f * z_loss * lse), b = -coef * smoothing / static_cast<float>(vocab);
    const float c = coef * (1.f - smoothing), log_s2 = log_s * cuda_rows::kLog2e;
    const int own = static_cast<int>(t - col0);  // outside [0, chunk) when another block holds the label
    const int packs = static_cast<int>(chunk / 8);
    auto write = [&](auto accumulating) {
      for (int q = threadIdx.x; q < packs; q += blockDim.x) {
        float v[8], o[8];
        load8(x + 8 * q, v);
        if constexpr (decltype(accumulating)::value) load8(out + 8 * q, o);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float p = cuda_rows::fast_exp2(fmaf(v[k] - m, cuda_rows::kLog2e, -log_s2));
          float grad = fmaf(a, p, b);
          if (8 * q + k == own) grad -= c;
          o[k] = decltype(accumulating)::value ? o[k] + grad : grad;
        }
        store8(out + 8 * q, o);
      }
    };
    if (accumulate) {
      write(std::true_type{});
    } else {
      write(std::false_type{});
    }
  }
};

// ---- distribution losses -------------------------------------------------------------------------------------

template <Kind K, typename TS, typename TT, typename TO>
struct DistributionPolicy {
  using Stats = RowPartials<K>;
  const TS* student;
  const TT* teacher;
  const int32_t* labels;  // null: every row counts
  TO* dstudent;
  float* row_loss;
  const float* denominator;
  int64_t vocab;
  int ignore_index;
  float inv_t, loss_scale;
  bool accumulate;

  // The student's chunk, then the teacher's (both multiples of 16 bytes: chunk is a multiple of 8).
  __host__ __device__ static uint32_t buffer_bytes(int64_t chunk) {
    return static_cast<uint32_t>(chunk * (sizeof(TS) + sizeof(TT)));
  }

  __device__ void copy_row(int64_t row, int64_t col0, int64_t chunk, unsigned char* buffer, uint64_t* bar) const {
    bulk_copy(buffer, student + row * vocab + col0, static_cast<uint32_t>(chunk * sizeof(TS)), bar);
    bulk_copy(buffer + chunk * sizeof(TS), teacher + row * vocab + col0, static_cast<uint32_t>(chunk * sizeof(TT)),
              bar);
  }

  __device__ Stats block_stats(const unsigned char* data, int64_t chunk, int64_t, int64_t, Scratch& scratch) const {
    const TS* x = reinterpret_cast<const TS*>(data);
    const TT* t = reinterpret_cast<const TT*>(data + chunk * sizeof(TS));
    const int packs = static_cast<int>(chunk / 8);
    float mx = -INFINITY, mt = -INFINITY;
    for (int q = threadIdx.x; q < packs; q += blockDim.x) {
      float a[8], b[8];
      load8(x + 8 * q, a);
      load8(t + 8 * q, b);
#pragma unroll
      for (int k = 0; k < 8; ++k) mx = fmaxf(mx, a[k] * inv_t), mt = fmaxf(mt, b[k] * inv_t);
    }
    mx = block_max(mx, scratch.max);
    mt = block_max(mt, scratch.max);
    // Relative to the block's maxima, known now: no rebasing, two exponentials per element. A side whose block
    // maximum is -inf has only -inf values: measured from 0 instead, each gives e^-inf = 0 (not -inf - -inf). The
    // partial's terms follow RowPartials::add: a term against a -inf on the other side is +inf (flagged), not NaN.
    const float from_x = mx == -INFINITY ? 0.f : mx, from_t = mt == -INFINITY ? 0.f : mt;
    float4 sums = make_float4(0.f, 0.f, 0.f, 0.f);  // s, z, cross, infinite
    for (int q = threadIdx.x; q < packs; q += blockDim.x) {
      float a[8], b[8];
      load8(x + 8 * q, a);
      load8(t + 8 * q, b);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float xs = a[k] * inv_t, ts = b[k] * inv_t;
        const bool x_in = xs != -INFINITY, t_in = ts != -INFINITY;
        const float ex = exp_shifted(xs - from_x), et = exp_shifted(ts - from_t);
        sums.x += ex;
        sums.y += et;
        if constexpr (K == Kind::ForwardKL) {
          sums.z += t_in && x_in ? et * (ts - xs) : 0.f;
          sums.w += t_in && !x_in ? 1.f : 0.f;
        } else if constexpr (K == Kind::SoftCrossEntropy) {
          sums.z += t_in && x_in ? et * (mx - xs) : 0.f;
          sums.w += t_in && !x_in ? 1.f : 0.f;
        } else {
          sums.z += x_in && t_in ? ex * (xs - ts) : 0.f;
          sums.w += x_in && !t_in ? 1.f : 0.f;
        }
      }
    }
    sums = block_sum4(sums, scratch.sums);
    Stats out{mx, mt, sums.x, sums.y, sums.z, sums.w > 0.f};
    return out;
  }

  __device__ void finish_row(const unsigned char* data, int64_t chunk, int64_t col0, int64_t row, const Stats& g,
                             bool leader) const {
    const TS* x = reinterpret_cast<const TS*>(data);
    const TT* t = reinterpret_cast<const TT*>(data + chunk * sizeof(TS));
    TO* out = dstudent + row * vocab + col0;
    if (labels != nullptr && labels[row] == ignore_index) {
      if (leader) row_loss[row] = 0.f;
      if (!accumulate) {
        const float zeros[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int q = threadIdx.x; q < static_cast<int>(chunk / 8); q += blockDim.x) store8(out + 8 * q, zeros);
      }
      return;
    }
    const float log_s = logf(g.s), log_z = logf(g.z);
    const float cross = g.infinite ? INFINITY : g.cross;
    if (leader) row_loss[row] = loss_scale * cuda_rows::divergence(K, g.mx, g.mt, log_s, log_z, cross, g.s, g.z);
    const float centre = K == Kind::ReverseKL ? cross / g.s : 0.f;
    // d/dx = (1/T) d/dx': the chain rule through x / T, against the loss's T^2 (or 1).
    const float coef = loss_scale * inv_t / *denominator;
    const int packs = static_cast<int>(chunk / 8);
    auto write = [&](auto accumulating) {
      for (int q = threadIdx.x; q < packs; q += blockDim.x) {
        float a[8], b[8], o[8];
        load8(x + 8 * q, a);
        load8(t + 8 * q, b);
        if constexpr (decltype(accumulating)::value) load8(out + 8 * q, o);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float grad = cuda_rows::distribution_grad<K, /*kFast=*/true>(a[k] * inv_t, b[k] * inv_t, g.mx, log_s,
                                                                             g.mt, log_z, centre, coef);
          o[k] = decltype(accumulating)::value ? o[k] + grad : grad;
        }
        store8(out + 8 * q, o);
      }
    };
    if (accumulate) {
      write(std::true_type{});
    } else {
      write(std::false_type{});
    }
  }
};

// ---- small kernels ---------------------------------------------------------------------------------------------

__global__ void denominator_kernel(const int32_t* labels, int64_t rows, int ignore_index, Reduction reduction,
                                   double normalizer, float* out) {
  __shared__ double scratch[32];
  double valid = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) valid += labels[r] != ignore_index ? 1.0 : 0.0;
  valid = block_sum(valid, scratch);
  if (threadIdx.x != 0) return;
  double denom = 1.0;
  if (reduction == Reduction::Mean) denom = valid > 0.0 ? valid : 1.0;
  if (reduction == Reduction::Normalizer) denom = normalizer;
  *out = static_cast<float>(denom);
}

__global__ void reduce_loss_kernel(const float* row_loss, int64_t rows, const float* denominator, float* loss) {
  __shared__ double scratch[32];
  double total = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) total += row_loss[r];
  total = block_sum(total, scratch);
  if (threadIdx.x == 0) *loss = static_cast<float>(total / *denominator);
}

bool aligned_rows(const Tensor& t) {
  return !t.defined() || (t.ndim() == 2 && aligned16(t.raw_data()));  // tensors are row-major and dense
}

}  // namespace

bool supported(const Tensor& logits, const Tensor& teacher, const Tensor& grad) {
  if (!logits.device().is_cuda() || logits.ndim() != 2) return false;
  const cudaDeviceProp& props = rc::device_properties(logits.device().index);
  if (props.major < 9) return false;
  auto float_type = [](const Tensor& t) { return t.dtype() == DType::F32 || t.dtype() == DType::BF16; };
  if (!float_type(logits) || (teacher.defined() && !float_type(teacher)) || (grad.defined() && !float_type(grad)))
    return false;
  if (!aligned_rows(logits) || !aligned_rows(teacher) || !aligned_rows(grad)) return false;
  const int64_t per_column = dtype_size(logits.dtype()) + (teacher.defined() ? dtype_size(teacher.dtype()) : 0);
  return shape_for(logits.size(1), per_column).blocks > 0;
}

void denominator(const Tensor& labels, int64_t rows, int ignore_index, Reduction reduction, double normalizer,
                 Tensor& out) {
  rc::DeviceGuard guard(device_of(out, "row_resident denominator"));
  if (labels.defined() && reduction == Reduction::Mean) {
    denominator_kernel<<<1, 1024, 0, rc::current_stream()>>>(labels.data<int32_t>(), labels.numel(), ignore_index,
                                                             reduction, normalizer, out.data<float>());
  } else {
    // Every row counts: a mean divides by the row count, known here.
    const double fixed = reduction == Reduction::Sum          ? 1.0
                         : reduction == Reduction::Normalizer ? normalizer
                                                              : static_cast<double>(std::max<int64_t>(rows, 1));
    denominator_kernel<<<1, 32, 0, rc::current_stream()>>>(nullptr, 0, ignore_index, Reduction::Normalizer, fixed,
                                                           out.data<float>());
  }
  RETORT_CUDA_CHECK_LAUNCH();
}

void cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyParams& p, const Tensor& denominator,
                   bool accumulate, Tensor& row_loss, Tensor& dlogits) {
  rc::DeviceGuard guard(device_of(logits, "cross_entropy (one read)"));
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  check(p.vocab_start == 0 && p.vocab_total == vocab, "cross_entropy (one read): the whole vocabulary, one device");
  if (rows == 0) return;
  dispatch_float(logits.dtype(), "cross_entropy (one read)", [&](auto ti) {
    dispatch_float(dlogits.dtype(), "cross_entropy (one read) gradient", [&](auto to) {
      using T = typename decltype(ti)::type;
      using TO = typename decltype(to)::type;
      auto run = [&](auto shifted) {
        CrossEntropyPolicy<T, TO, decltype(shifted)::value> policy{logits.data<T>(),
                                                                   targets.data<int32_t>(),
                                                                   dlogits.data<TO>(),
                                                                   row_loss.data<float>(),
                                                                   denominator.data<float>(),
                                                                   rc::device_error_record(),
                                                                   vocab,
                                                                   p.ignore_index,
                                                                   static_cast<float>(p.smoothing),
                                                                   static_cast<float>(p.z_loss),
                                                                   accumulate};
        launch(policy, rows, vocab, sizeof(T));
      };
      if (p.smoothing != 0.0) {
        run(std::true_type{});
      } else {
        run(std::false_type{});
      }
    });
  });
}

void distribution(const Tensor& student, const Tensor& teacher, const Tensor& labels,
                  const distribution::DistributionParams& p, const Tensor& denominator, bool accumulate,
                  Tensor& row_loss, Tensor& dstudent) {
  rc::DeviceGuard guard(device_of(student, "distribution_loss (one read)"));
  const int64_t rows = student.size(0), vocab = student.size(1);
  if (rows == 0) return;
  auto body = [&](auto kind, auto ts, auto tt, auto to) {
    using TS = typename decltype(ts)::type;
    using TT = typename decltype(tt)::type;
    using TO = typename decltype(to)::type;
    DistributionPolicy<decltype(kind)::value, TS, TT, TO> policy{student.data<TS>(),
                                                                 teacher.data<TT>(),
                                                                 labels.defined() ? labels.data<int32_t>() : nullptr,
                                                                 dstudent.data<TO>(),
                                                                 row_loss.data<float>(),
                                                                 denominator.data<float>(),
                                                                 vocab,
                                                                 p.ignore_index,
                                                                 static_cast<float>(p.inv_temperature),
                                                                 static_cast<float>(p.loss_scale),
                                                                 accumulate};
    launch(policy, rows, vocab, sizeof(TS) + sizeof(TT));
  };
  dispatch_float(student.dtype(), "distribution_loss (one read) student", [&](auto ts) {
    dispatch_float(teacher.dtype(), "distribution_loss (one read) teacher", [&](auto tt) {
      dispatch_float(dstudent.dtype(), "distribution_loss (one read) gradient", [&](auto to) {
        switch (p.divergence) {
          case Kind::ForwardKL:
            return body(std::integral_constant<Kind, Kind::ForwardKL>{}, ts, tt, to);
          case Kind::ReverseKL:
            return body(std::integral_constant<Kind, Kind::ReverseKL>{}, ts, tt, to);
          case Kind::SoftCrossEntropy:
            return body(std::integral_constant<Kind, Kind::SoftCrossEntropy>{}, ts, tt, to);
        }
      });
    });
  });
}

void reduce_loss(const Tensor& row_loss, const Tensor& denominator, Tensor& loss) {
  rc::DeviceGuard guard(device_of(row_loss, "row_resident reduce_loss"));
  reduce_loss_kernel<<<1, 1024, 0, rc::current_stream()>>>(row_loss.data<float>(), row_loss.numel(),
                                                           denominator.data<float>(), loss.data<float>());
  RETORT_CUDA_CHECK_LAUNCH();
}

}  // namespace retort::losses::kernels::row_resident
