// The embedding of a decode step in one launch: the token row plus the position row, summed in float32 and rounded
// once to the compute dtype (what the lookup of each table, their add and the cast do as four launches). One block
// per output row, 16-byte packs when the rows allow. An id outside its table never indexes memory: the row is
// written as zeros, the id is recorded, and the host throws after the launch (as embedding_forward does).
// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

#include "core/kernels/cuda/dependent_launch.cuh"
#include "core/kernels/decode_kernels.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kMaxThreads = 256;

template <typename TT, typename TO>
__global__ void embedding_sum_kernel(const TT* table, const int32_t* ids, int64_t rows, const TT* table2,
                                     const int32_t* ids2, int64_t rows2, TO* out, int64_t n, int64_t cols, bool vec,
                                     rc::DeviceErrorRecord* errors) {
  // The first product of the step may start now and prefetch its weights (dependent_launch.cuh).
  allow_dependents();
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int id = ids[i];
    const int id2 = table2 ? ids2[i] : 0;
    TO* dst = out + i * cols;
    const bool bad = id < 0 || id >= rows, bad2 = table2 && (id2 < 0 || id2 >= rows2);
    if (bad || bad2) {
      if (threadIdx.x == 0) report_bad_index(errors, bad ? id : id2, i);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = from_f32<TO>(0.f);
      continue;
    }
    const TT* a = table + static_cast<int64_t>(id) * cols;
    const TT* b = table2 ? table2 + static_cast<int64_t>(id2) * cols : nullptr;
    if (vec) {
      for (int64_t p = threadIdx.x; p < cols / 8; p += blockDim.x) {
        float v[8], w[8] = {};
        load8(a + 8 * p, v);
        if (b) load8(b + 8 * p, w);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] += w[k];
        store8(dst + 8 * p, v);
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        dst[c] = from_f32<TO>(to_f32(a[c]) + (b ? to_f32(b[c]) : 0.f));
    }
  }
}

}  // namespace

void embedding_sum(const Tensor& table, const Tensor& ids, const Tensor& table2, const Tensor& ids2, Tensor& out) {
  rc::DeviceGuard guard(device_of(table, "embedding_sum"));
  const int64_t n = ids.numel(), cols = table.size(1);
  if (n == 0 || cols == 0) return;
  const bool two = table2.defined();
  dispatch_float(table.dtype(), "embedding_sum", [&](auto tt) {
    dispatch_float(out.dtype(), "embedding_sum", [&](auto to) {
      using TT = typename decltype(tt)::type;
      using TO = typename decltype(to)::type;
      const bool vec = rows_vectorizable(table.raw_data(), cols) && rows_vectorizable(out.raw_data(), cols) &&
                       (!two || rows_vectorizable(table2.raw_data(), cols));
      embedding_sum_kernel<TT, TO><<<row_grid(n), row_threads(cols, kMaxThreads), 0, rc::current_stream()>>>(
          table.data<TT>(), ids.data<int32_t>(), table.size(0), two ? table2.data<TT>() : nullptr,
          two ? ids2.data<int32_t>() : nullptr, two ? table2.size(0) : 0, out.data<TO>(), n, cols, vec,
          rc::device_error_record());
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
  if (auto bad = rc::take_device_error()) {
    fail_input(
        "embedding_sum: token id {} at position {} is outside the embedding table: the data was made with a larger "
        "vocabulary than the model's",
        bad->value, bad->position);
  }
}

}  // namespace retort::kernels::cuda
