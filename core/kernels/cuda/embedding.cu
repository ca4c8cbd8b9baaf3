// clang-format off
#include "core/kernels/cuda/common.cuh"  // first: it configures fmt for nvcc
// clang-format on

// Embedding lookup and its gradient.
// Forward: one block per output row copies the table row (16-byte packs when the rows allow it).
// Backward, deterministic and free of atomics: the ids are radix-sorted together with their positions (a
// stable sort, so equal ids keep their positions in order), then the block at the start of each run of
// equal ids adds that run's gradient rows in order in float32 and updates the table row once. Each table
// row has exactly one writer, so repeated ids add up exactly as on the CPU and bf16 tables round once.
// An id outside [0, id_limit) never indexes memory: the forward pass writes a zero row, the backward pass
// skips it, both record it, and the host throws after the launch. A vocab shard (rows [row_start, row_start +
// rows) of the global table) treats a valid id owned by another shard the same way, without the error.
#include <cub/device/device_radix_sort.cuh>

#include "core/kernels/backends.h"

namespace retort::kernels::cuda {
namespace {
using namespace detail;

constexpr int kMaxThreads = 256;

template <typename TT, typename TO>
__global__ void embedding_forward_kernel(const TT* table, const int32_t* ids, TO* out, int64_t n, int64_t rows,
                                         int64_t row_start, int64_t id_limit, int64_t cols, bool vec,
                                         rc::DeviceErrorRecord* errors) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int id = ids[i];
    const int64_t local = static_cast<int64_t>(id) - row_start;
    TO* dst = out + i * cols;
    if (id < 0 || id >= id_limit || local < 0 || local >= rows) {
      if (threadIdx.x == 0 && (id < 0 || id >= id_limit)) report_bad_index(errors, id, i);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = from_f32<TO>(0.f);
      continue;
    }
    const TT* src = table + local * cols;
    if (vec) {
      for (int64_t p = threadIdx.x; p < cols / 8; p += blockDim.x) {
        float v[8];
        load8(src + 8 * p, v);
        store8(dst + 8 * p, v);
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = from_f32<TO>(to_f32(src[c]));
    }
  }
}

// Sort keys: the local row, or `vocab` (past every local row) for an id this shard does not own, so that it
// sorts last.
__global__ void embedding_keys_kernel(const int32_t* ids, int64_t n, int vocab, int64_t row_start, int64_t id_limit,
                                      int32_t* keys, int32_t* positions, rc::DeviceErrorRecord* errors) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int id = ids[i];
    if (id < 0 || id >= id_limit) report_bad_index(errors, id, i);
    const int64_t local = static_cast<int64_t>(id) - row_start;
    const bool owned = id >= 0 && id < id_limit && local >= 0 && local < vocab;
    keys[i] = owned ? static_cast<int32_t>(local) : vocab;
    positions[i] = static_cast<int32_t>(i);
  }
}

template <typename TD, typename TT>
__global__ void embedding_backward_kernel(const TD* dout, const int32_t* sorted_ids, const int32_t* positions,
                                          int64_t n, int vocab, int64_t cols, TT* dtable) {
  for (int64_t start = blockIdx.x; start < n; start += gridDim.x) {
    const int id = sorted_ids[start];
    if (id >= vocab || (start > 0 && sorted_ids[start - 1] == id)) continue;  // not the first of its run
    int64_t end = start + 1;
    while (end < n && sorted_ids[end] == id) ++end;
    TT* row = dtable + static_cast<int64_t>(id) * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float acc = 0.f;
      for (int64_t j = start; j < end; ++j) acc += to_f32(dout[static_cast<int64_t>(positions[j]) * cols + c]);
      row[c] = from_f32<TT>(to_f32(row[c]) + acc);
    }
  }
}

int bits_for(int64_t max_value) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= max_value) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(const Tensor& table, const Tensor& ids, int64_t row_start, int64_t id_limit, Tensor& out) {
  rc::DeviceGuard guard(device_of(table, "embedding_forward"));
  check(ids.dtype() == DType::I32, "embedding_forward (CUDA): ids {} must be i32", ids.describe());
  const int64_t vocab = table.size(0), cols = table.size(1), n = ids.numel();
  if (n == 0 || cols == 0) return;
  dispatch_float(table.dtype(), "embedding_forward", [&](auto tt) {
    dispatch_float(out.dtype(), "embedding_forward", [&](auto to) {
      using TT = typename decltype(tt)::type;
      using TO = typename decltype(to)::type;
      const bool vec = rows_vectorizable(table.raw_data(), cols) && rows_vectorizable(out.raw_data(), cols);
      embedding_forward_kernel<TT, TO><<<row_grid(n), row_threads(cols, kMaxThreads), 0, rc::current_stream()>>>(
          table.data<TT>(), ids.data<int32_t>(), out.data<TO>(), n, vocab, row_start, id_limit, cols, vec,
          rc::device_error_record());
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
  if (auto bad = rc::take_device_error()) {
    fail_input(
        "embedding_forward: token id {} at position {} is outside the embedding table of {} rows: the data was made "
        "with a larger vocabulary than the model's",
        bad->value, bad->position, id_limit);
  }
}

void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t row_start, int64_t id_limit, Tensor& dtable) {
  rc::DeviceGuard guard(device_of(dtable, "embedding_backward"));
  check(ids.dtype() == DType::I32, "embedding_backward (CUDA): ids {} must be i32", ids.describe());
  const int64_t vocab = dtable.size(0), cols = dtable.size(1), n = ids.numel();
  if (n == 0 || cols == 0) return;
  check(n < INT32_MAX && vocab < INT32_MAX, "embedding_backward (CUDA): {} ids into {} rows exceed 32-bit indexing", n,
        vocab);
  cudaStream_t stream = rc::current_stream();
  // keys_in | positions_in | keys_out | positions_out, then CUB's temporary storage.
  const size_t list_bytes = static_cast<size_t>(n) * sizeof(int32_t);
  size_t sort_bytes = 0;
  RETORT_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const int32_t*>(nullptr),
                                      static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                      static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, bits_for(vocab), stream));
  const size_t lists_bytes = (4 * list_bytes + 255) / 256 * 256;
  rc::ScratchBuffer scratch(lists_bytes + sort_bytes);
  auto* keys_in = static_cast<int32_t*>(scratch.data());
  int32_t* positions_in = keys_in + n;
  int32_t* keys_out = positions_in + n;
  int32_t* positions_out = keys_out + n;
  void* sort_temp = static_cast<char*>(scratch.data()) + lists_bytes;

  embedding_keys_kernel<<<grid_for(n, 256), 256, 0, stream>>>(ids.data<int32_t>(), n, static_cast<int>(vocab),
                                                              row_start, id_limit, keys_in, positions_in,
                                                              rc::device_error_record());
  RETORT_CUDA_CHECK_LAUNCH();
  // Keys lie in [0, vocab], so only the low bits take part in the sort.
  RETORT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, keys_in, keys_out, positions_in,
                                                    positions_out, static_cast<int>(n), 0, bits_for(vocab), stream));
  dispatch_float(dout.dtype(), "embedding_backward", [&](auto td) {
    dispatch_float(dtable.dtype(), "embedding_backward", [&](auto tt) {
      using TD = typename decltype(td)::type;
      using TT = typename decltype(tt)::type;
      embedding_backward_kernel<TD, TT><<<row_grid(n), row_threads(cols, kMaxThreads), 0, stream>>>(
          dout.data<TD>(), keys_out, positions_out, n, static_cast<int>(vocab), cols, dtable.data<TT>());
      RETORT_CUDA_CHECK_LAUNCH();
    });
  });
  if (auto bad = rc::take_device_error()) {
    fail_input(
        "embedding_backward: token id {} at position {} is outside the embedding table of {} rows: the data was made "
        "with a larger vocabulary than the model's",
        bad->value, bad->position, id_limit);
  }
}

}  // namespace retort::kernels::cuda
