#pragma once
// Shared by the communicator tests: rank-dependent inputs whose reductions are exact in every dtype, so
// results compare with == (bf16 included), and a runner that turns a rank's failure into a test failure.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "core/tensor/tensor.h"
#include "core/util/error.h"
#include "parallel/comm/thread_ranks.h"

namespace retort::comm_testing {

// Small multiples of 1/2 (at most 7 significant bits): exact in bf16, and so are their maxima; sums are
// exact in f32, f64 and i32, and the bf16 backends round the exact sum once.
inline double input_value(int rank, int64_t index, DType dtype) {
  const double base = static_cast<double>(index % 61) - 30.0 + 3.0 * rank;
  return dtype == DType::I32 ? base : base / 2.0;
}

inline Tensor rank_tensor(int rank, const Shape& shape, DType dtype) {
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = input_value(rank, static_cast<int64_t>(i), dtype);
  return Tensor::from_doubles(values, shape, dtype);
}

// What a value of `dtype` reads back as (the rounding the tensor's storage applies).
inline double stored(double value, DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return static_cast<float>(BFloat16(static_cast<float>(value)));
    case DType::F32:
      return static_cast<float>(value);
    default:
      return value;
  }
}

inline GlooOptions test_options(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  GlooOptions options;
  options.timeout = timeout;
  return options;
}

// Runs body on `world` thread ranks; any rank's exception fails the test with that rank's message.
inline void on_ranks(int world, const RankBody& body, const GlooOptions& options = test_options()) {
  const auto failures = run_ranks_collect(world, body, options);
  for (const auto& failure : failures)
    ADD_FAILURE() << "world " << world << ", rank " << failure.rank << ": " << failure.message;
}

}  // namespace retort::comm_testing
