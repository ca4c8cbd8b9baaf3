#include <algorithm>
#include <cstring>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

namespace {
void check_ids(const Tensor& ids, int64_t vocab) {
  const int32_t* p = ids.data<int32_t>();
  for (int64_t n = 0; n < ids.numel(); ++n) {
    if (p[n] < 0 || p[n] >= vocab)
      throw InputError(
          fmt::format("token id {} at position {} is outside the embedding table of {} rows: the data "
                      "was made with a larger vocabulary than the model's",
                      p[n], n, vocab));
  }
}
}  // namespace

void embedding_forward(const Tensor& table, const Tensor& ids, int64_t row_start, int64_t id_limit, Tensor& out) {
  const int64_t rows = table.size(0), cols = table.size(1), n = ids.numel();
  check_ids(ids, id_limit);
  const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(table.dtype());
  const auto* src = static_cast<const std::byte*>(table.raw_data());
  auto* dst = static_cast<std::byte*>(out.raw_data());
  const int32_t* p = ids.data<int32_t>();
  // Rows are copied bytewise, so this works for every storage dtype alike.
#pragma omp parallel for if (n * cols > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = p[i] - row_start;
    if (row >= 0 && row < rows)
      std::memcpy(dst + i * row_bytes, src + row * row_bytes, row_bytes);
    else
      std::memset(dst + i * row_bytes, 0, row_bytes);  // owned by another shard (all-bits-zero is 0 in every dtype)
  }
}

void embedding_backward(const Tensor& dout_in, const Tensor& ids, int64_t row_start, int64_t id_limit,
                        Tensor& dtable_in) {
  Tensor dout = widen(dout_in);
  OutputSlot slot(dtable_in, /*keep_contents=*/true);
  Tensor& dtable = slot.get();
  const int64_t rows = dtable.size(0), cols = dtable.size(1), n = ids.numel();
  check_ids(ids, id_limit);
  dispatch_real(dtable.dtype(), [&]<typename T>() {
    const int32_t* p = ids.data<int32_t>();
    // Threads own disjoint column ranges, so repeated ids add up without races and in a fixed order.
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for if (n * cols > 65536)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * kBlock, c1 = std::min(cols, c0 + kBlock);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t local = p[i] - row_start;
        if (local < 0 || local >= rows) continue;
        const T* g = dout.data<T>() + i * cols;
        T* row = dtable.data<T>() + local * cols;
        for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
      }
    }
  });
  slot.finish();
}

}  // namespace retort::kernels::cpu
