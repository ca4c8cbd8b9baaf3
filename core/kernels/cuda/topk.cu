// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Per-row top-k without sorting the row: a radix select finds the k-th largest value on the order-preserving
// 32-bit keys of the floats (digits of 12, 10 and 10 bits, counted in shared-memory histograms, one read of
// the row per digit; it stops early once the bin holding the k-th value is taken whole), a compaction copies
// the k survivors to shared memory, and a bitonic sort of at most 256 (key, column) pairs orders them. The
// first read also gives the row's log-sum-exp. One block per row. When the k-th value is shared by more entries
// than are needed (frequent in bf16, whose 8-bit mantissa makes exact ties common), the smallest columns among
// them win: a few ties are collected in one pass and ranked in shared memory; many are taken by a column-ordered
// walk of the row.
#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kMaxK = 256;
constexpr int kMaxRankedTies = 1024;  // above this, the column-ordered walk is cheaper than ranking them all
constexpr int kBins = 1 << 12;        // the widest digit
constexpr int kPasses = 3;
__constant__ int kShift[kPasses] = {20, 10, 0};
__constant__ int kBits[kPasses] = {12, 10, 10};

// Larger float -> larger key; -0 and +0 share a key (the CPU kernel uses the same mapping).
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v == 0.f) v = 0.f;
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// Sorting these descending orders by key, then by the smaller column (columns are < 2^31, so ~column > 0 and
// the zero padding sorts last).
__device__ __forceinline__ uint64_t pack(uint32_t key, int64_t column) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(column));
}
__device__ __forceinline__ uint32_t column_of(uint64_t packed) {
  return ~static_cast<uint32_t>(packed);
}

struct SelectState {
  int digit;
  int above;  // elements of the current candidate set in higher bins
  int count;  // elements in the chosen bin
};

// Inclusive suffix sum over the block (thread t gets the sum over threads >= t). scratch: 32 entries.
__device__ __forceinline__ int block_suffix_sum(int v, int* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_down_sync(0xffffffffu, v, o);
    if (lane + o < 32) v += y;
  }
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  for (int w = warp + 1; w < warps; ++w) v += scratch[w];
  __syncthreads();
  return v;
}

template <typename T>
__global__ void topk_kernel(const T* x, int64_t rows, int64_t cols, int k, int64_t index_base, const int32_t* ids,
                            float* values, int32_t* indices, float* row_lse) {
  __shared__ int hist[kBins];
  __shared__ uint64_t survivors[kMaxK];
  __shared__ int32_t tie_columns[kMaxRankedTies];
  __shared__ float lse_scratch[64];
  __shared__ int scan_scratch[32];
  __shared__ SelectState chosen;
  __shared__ int count_above, count_tie;
  const int sort_size = k <= 1 ? 1 : 1 << (32 - __clz(k - 1));  // next power of two >= k

  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    uint32_t prefix = 0, mask = 0;
    int needed = k, last_bin_count = 0;
    bool bin_taken_whole = false;
    for (int p = 0; p < kPasses && !bin_taken_whole; ++p) {
      const int shift = kShift[p], bins = 1 << kBits[p];
      for (int i = threadIdx.x; i < bins; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      const bool with_lse = p == 0 && row_lse != nullptr;
      OnlineLse lse;
      visit_row(xr, cols, [&](int64_t, float v) {
        if (with_lse) lse.add(v);
        const uint32_t key = order_key(v);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & (bins - 1)], 1);
      });
      if (with_lse) {
        lse = block_lse(lse, lse_scratch);
        if (threadIdx.x == 0) row_lse[r] = lse.max == -INFINITY ? -INFINITY : lse.max + logf(lse.sum);
      }
      __syncthreads();
      // Thread t owns a run of bins; the suffix sums over threads say which run holds the k-th largest.
      const int per = (bins + blockDim.x - 1) / blockDim.x;
      const int lo = min(bins, static_cast<int>(threadIdx.x) * per), hi = min(bins, lo + per);
      int mine = 0;
      for (int b = lo; b < hi; ++b) mine += hist[b];
      const int above = block_suffix_sum(mine, scan_scratch) - mine;
      if (above < needed && above + mine >= needed) {
        int acc = above;
        for (int b = hi - 1; b >= lo; --b) {
          if (acc + hist[b] >= needed) {
            chosen = SelectState{b, acc, hist[b]};
            break;
          }
          acc += hist[b];
        }
      }
      __syncthreads();
      const SelectState s = chosen;
      needed -= s.above;
      prefix |= static_cast<uint32_t>(s.digit) << shift;
      mask |= static_cast<uint32_t>(bins - 1) << shift;
      bin_taken_whole = s.count == needed;
      last_bin_count = s.count;
      __syncthreads();  // `chosen` and `hist` are rewritten by the next pass
    }

    // Survivors: every key above the chosen bin, then `needed` keys of the bin (all of it, or, when the bin is
    // one exact key shared by more entries than needed, those of the smallest columns).
    // Otherwise the chosen bin is one exact key (every digit is fixed) held by last_bin_count > needed entries.
    const uint32_t upper = prefix | ~mask;
    const int strictly_above = k - needed;
    const bool rank_ties = !bin_taken_whole && last_bin_count <= kMaxRankedTies;
    if (threadIdx.x == 0) count_above = 0, count_tie = 0;
    __syncthreads();
    visit_row(xr, cols, [&](int64_t j, float v) {
      const uint32_t key = order_key(v);
      if (key > upper) {
        survivors[atomicAdd(&count_above, 1)] = pack(key, j);
      } else if (bin_taken_whole && (key & mask) == prefix) {
        survivors[strictly_above + atomicAdd(&count_tie, 1)] = pack(key, j);
      } else if (rank_ties && key == prefix) {
        tie_columns[atomicAdd(&count_tie, 1)] = static_cast<int32_t>(j);
      }
    });
    if (rank_ties) {
      __syncthreads();
      // A tie's place among the tied columns is the number of smaller ones; the first `needed` places survive.
      for (int i = threadIdx.x; i < last_bin_count; i += blockDim.x) {
        const int32_t column = tie_columns[i];
        int place = 0;
        for (int m = 0; m < last_bin_count; ++m) place += tie_columns[m] < column;
        if (place < needed) survivors[strictly_above + place] = pack(prefix, column);
      }
    } else if (!bin_taken_whole) {
      // Ties at the k-th value: walk the row in column order, tile by tile, numbering the tied entries with a
      // block-wide scan, until `needed` of them are in.
      const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
      int taken = 0;
      for (int64_t base = 0; base < cols && taken < needed; base += blockDim.x) {
        const int64_t j = base + threadIdx.x;
        bool tie = false;
        uint32_t key = 0;
        if (j < cols) {
          key = order_key(to_f32(xr[j]));
          tie = key == prefix;
        }
        const unsigned ballot = __ballot_sync(0xffffffffu, tie);
        if (lane == 0) scan_scratch[warp] = __popc(ballot);
        __syncthreads();
        int before = taken, total = taken;
        for (int w = 0; w < warps; ++w) {
          if (w < warp) before += scan_scratch[w];
          total += scan_scratch[w];
        }
        const int position = before + __popc(ballot & ((1u << lane) - 1u));
        if (tie && position < needed) survivors[strictly_above + position] = pack(key, j);
        taken = total;
        __syncthreads();  // scan_scratch is rewritten by the next tile
      }
    }
    for (int i = k + threadIdx.x; i < sort_size; i += blockDim.x) survivors[i] = 0;
    __syncthreads();

    // Bitonic sort, descending, of sort_size <= 256 packed pairs.
    for (int size = 2; size <= sort_size; size <<= 1) {
      for (int stride = size / 2; stride > 0; stride >>= 1) {
        for (int i = threadIdx.x; i < sort_size; i += blockDim.x) {
          const int partner = i ^ stride;
          if (partner > i) {
            const uint64_t a = survivors[i], b = survivors[partner];
            const bool descending = (i & size) == 0;
            if ((a < b) == descending) survivors[i] = b, survivors[partner] = a;
          }
        }
        __syncthreads();
      }
    }
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
      const uint32_t c = column_of(survivors[i]);
      values[r * k + i] = to_f32(xr[c]);
      indices[r * k + i] = ids ? ids[r * cols + c] : static_cast<int32_t>(index_base + c);
    }
    __syncthreads();  // survivors are rewritten by the next row
  }
}

}  // namespace

void topk(const Tensor& x, int64_t index_base, const Tensor& ids, Tensor& values, Tensor& indices, Tensor& row_lse) {
  rc::DeviceGuard guard(device_of(x, "topk"));
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const int k = static_cast<int>(values.size(-1));
  if (k > kMaxK) fail_input("topk (CUDA): k = {} is more than the {} the GPU kernel supports; ask for fewer", k, kMaxK);
  if (cols > INT32_MAX) fail_input("topk (CUDA): rows of {} entries are wider than int32 columns", cols);
  const int threads = std::clamp(row_threads(cols), 128, 1024);
  dispatch_float(x.dtype(), "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    topk_kernel<T><<<row_grid(rows), threads, 0, rc::current_stream()>>>(
        x.data<T>(), rows, cols, k, index_base, ids.defined() ? ids.data<int32_t>() : nullptr, values.data<float>(),
        indices.data<int32_t>(), row_lse.defined() ? row_lse.data<float>() : nullptr);
    RETORT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace retort::kernels::cuda
