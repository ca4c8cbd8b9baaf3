// The sampler's shard passes on the CPU: rows in parallel, each row read once per pass.
#include <algorithm>

#include "core/tensor/dtype.h"
#include "core/util/error.h"
#include "parallel/generate/sampler_kernels.h"
#include "parallel/generate/sampling_math.h"

namespace retort::generate::kernels::cpu {

namespace {

// f(row, column, value) for every entry, rows spread over the OpenMP threads.
template <typename F>
void for_each_entry(const Tensor& logits, F&& f) {
  const int64_t rows = logits.size(0), cols = logits.size(1);
  auto visit = [&](auto* data) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const auto* row = data + r * cols;
      for (int64_t j = 0; j < cols; ++j) f(r, j, static_cast<float>(row[j]));
    }
  };
  switch (logits.dtype()) {
    case DType::F32:
      visit(logits.data<float>());
      return;
    case DType::BF16:
      visit(logits.data<BFloat16>());
      return;
    default:
      RETORT_CHECK(false, "sampler: logits {} must be f32 or bf16", logits.describe());
  }
}

}  // namespace

std::vector<uint64_t> best_gumbel_candidates(const Tensor& logits, int64_t index_base, double temperature,
                                             uint64_t seed, const std::vector<uint64_t>& row_keys,
                                             const std::vector<uint32_t>& min_keys) {
  std::vector<uint64_t> best(static_cast<size_t>(logits.size(0)), 0);
  for_each_entry(logits, [&](int64_t r, int64_t j, float x) {
    const size_t row = static_cast<size_t>(r);
    if (sampling::order_key(x) < min_keys[row]) return;
    const int64_t id = index_base + j;
    const double noise = sampling::gumbel_noise(seed, row_keys[row], id);
    best[row] = std::max(best[row], sampling::pack_candidate(sampling::score_key(x, temperature, noise), id));
  });
  return best;
}

std::vector<uint64_t> nucleus_histogram(const Tensor& logits, double temperature, const std::vector<float>& row_max,
                                        const std::vector<uint32_t>& prefixes, uint32_t mask, int shift) {
  std::vector<uint64_t> bins(static_cast<size_t>(logits.size(0) * sampling::kBins), 0);
  for_each_entry(logits, [&](int64_t r, int64_t, float x) {
    const size_t row = static_cast<size_t>(r);
    const uint32_t key = sampling::order_key(x);
    if ((key & mask) != prefixes[row]) return;
    const size_t bin = (key >> shift) & (sampling::kBins - 1);
    bins[row * sampling::kBins + bin] += sampling::quantized_mass(x, row_max[row], temperature);
  });
  return bins;
}

}  // namespace retort::generate::kernels::cpu
