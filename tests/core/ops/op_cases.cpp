#include "tests/core/ops/op_cases.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "core/ops/ops.h"

namespace retort::op_testing {

Bounds storage_bounds(const Storage& s) {
  const bool all_f32 = s.activations == DType::F32 && s.parameters == DType::F32;
  return all_f32 ? Bounds{1e-5, 1e-5} : Bounds{1e-2, 1e-2};
}

std::string dims_str(const Dims& d) {
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0) out += 'x';
    out += std::to_string(d[i]);
  }
  return out;
}

uint64_t run_seed(const std::string& name, const Dims& dims, const std::string& purpose) {
  return std::hash<std::string>{}(name + "/" + dims_str(dims) + "/" + purpose);
}

std::vector<DrawnInput> draw_inputs(const std::vector<Input>& inputs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<DrawnInput> drawn(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Input& in = inputs[k];
    const int64_t n = shape_numel(in.shape);
    if (in.is_ids()) {
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(in.draw.a) - 1);
      auto& ids = drawn[k].ids;
      ids.resize(static_cast<size_t>(n));
      for (auto& id : ids) id = pick(rng);
      for (int64_t i = 0; i + 1 < n; i += 4) ids[i + 1] = ids[i];
      if (in.draw.ignore_every > 0)
        for (int64_t i = 0; i < n; ++i)
          if (i % in.draw.ignore_every == 1) ids[i] = -100;
      continue;
    }
    auto& values = drawn[k].values;
    values.resize(static_cast<size_t>(n));
    if (in.draw.kind == Draw::Kind::Normal) {
      std::normal_distribution<double> dist(0.0, in.draw.a);
      for (double& v : values) v = dist(rng);
    } else {
      std::uniform_real_distribution<double> dist(in.draw.a, in.draw.b);
      for (double& v : values) v = dist(rng);
    }
    if (in.draw.minus_inf_row >= 0) {
      const int64_t cols = in.shape.back();
      std::fill_n(values.begin() + in.draw.minus_inf_row * cols, cols, -std::numeric_limits<double>::infinity());
    }
  }
  return drawn;
}

namespace {

Tensor stored_input(const Input& in, const DrawnInput& d, DType dtype, Device device, bool misaligned) {
  if (in.is_ids()) return Tensor::from_ints(d.ids, in.shape, device);
  if (!misaligned) return Tensor::from_doubles(d.values, in.shape, dtype, device);
  // One element of padding in front: the input's data starts one element into its allocation.
  std::vector<double> padded(d.values.size() + 1, 0.25);
  std::copy(d.values.begin(), d.values.end(), padded.begin() + 1);
  const int64_t n = static_cast<int64_t>(d.values.size());
  return Tensor::from_doubles(padded, {n + 1}, dtype, device).rows(1, n).view(in.shape);
}

std::vector<Tensor> make(const std::vector<Input>& inputs, const std::vector<DrawnInput>& drawn,
                         const std::function<DType(const Input&)>& dtype_of, Device device, bool misaligned,
                         bool requires_grad) {
  std::vector<Tensor> out;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor t = stored_input(inputs[k], drawn[k], dtype_of(inputs[k]), device, misaligned);
    if (requires_grad && inputs[k].differentiable && !inputs[k].is_ids()) t.set_requires_grad();
    out.push_back(t);
  }
  return out;
}

}  // namespace

std::vector<Tensor> make_inputs(const std::vector<Input>& inputs, const std::vector<DrawnInput>& drawn,
                                const Storage& storage, Device device, bool misaligned, bool requires_grad) {
  return make(
      inputs, drawn, [&](const Input& in) { return in.parameter ? storage.parameters : storage.activations; }, device,
      misaligned, requires_grad);
}

std::vector<Tensor> make_inputs_as(const std::vector<Input>& inputs, const std::vector<DrawnInput>& drawn, DType dtype,
                                   Device device, bool requires_grad) {
  return make(
      inputs, drawn, [&](const Input&) { return dtype; }, device, false, requires_grad);
}

namespace {

// ---- helpers for the table ----

Input activation(std::string name, Shape shape, Draw draw = uniform(-2, 2)) {
  return {std::move(name), std::move(shape), draw};
}
Input weight(std::string name, Shape shape, Draw draw) {
  return {std::move(name), std::move(shape), draw, true, true};
}
Input id_input(std::string name, Shape shape, Draw draw) {
  return {std::move(name), std::move(shape), draw, false};
}

// Dims as a shape (the elementwise ops: the dims are the operands' shape).
Shape as_shape(const Dims& d) {
  return Shape(d.begin(), d.end());
}

// The element counts the kernels' vectorised paths are checked at: one element, fewer than a pack, and sizes
// that leave heads and tails (37 x 1023, 3 x 4097).
const std::vector<Dims> kFlatSizes = {{1}, {7}, {1000}, {37 * 1023}, {4097 * 3}};

// [rows, cols] for every row count and width the row-wise kernels are checked at (5 M elements at most).
std::vector<Dims> row_shapes(const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
                             const std::vector<int64_t>& extra = {}) {
  std::vector<Dims> out;
  for (int64_t r : rows)
    for (int64_t c : cols) {
      if (r * c > 5'000'000) continue;
      Dims d{r, c};
      d.insert(d.end(), extra.begin(), extra.end());
      out.push_back(d);
    }
  return out;
}

// The norms' rows x widths: one column, odd widths around the vector packs, GPT-2's 768 over 300 rows, and a
// row wider than one block's loop.
const std::vector<Dims> kNormShapes = {{37, 1},    {37, 7},    {37, 64},   {37, 1000},
                                       {37, 1023}, {37, 4097}, {300, 768}, {3, 30001}};

std::vector<Dims> concat_dims(const std::vector<std::vector<Dims>>& parts) {
  std::vector<Dims> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

std::vector<Dims> with_flag(const std::vector<Dims>& shapes, const std::vector<int64_t>& flags) {
  std::vector<Dims> out;
  for (const Dims& d : shapes)
    for (int64_t f : flags) {
      Dims e = d;
      e.push_back(f);
      out.push_back(e);
    }
  return out;
}

// Two operands of the same shape, drawn alike.
std::function<std::vector<Input>(const Dims&)> two_operands(Draw draw = uniform(-2, 2)) {
  return [draw](const Dims& d) {
    return std::vector<Input>{activation("a", as_shape(d), draw), activation("b", as_shape(d), draw)};
  };
}
std::function<std::vector<Input>(const Dims&)> one_operand(Draw draw = uniform(-2, 2)) {
  return [draw](const Dims& d) { return std::vector<Input>{activation("x", as_shape(d), draw)}; };
}

// matmul dims: m, k, n, a's batch, b's batch (0: a 2-D operand shared by the batch), trans_a, trans_b.
Shape matmul_operand(int64_t batch, int64_t rows, int64_t cols) {
  return batch == 0 ? Shape{rows, cols} : Shape{batch, rows, cols};
}

// Every transpose combination of each matmul shape; a right operand shared by a batch takes only a
// non-transposed left one (what ops::matmul's backward supports).
std::vector<Dims> matmul_layouts(const std::vector<Dims>& shapes) {
  std::vector<Dims> out;
  for (const Dims& s : shapes)
    for (int64_t ta : {0, 1})
      for (int64_t tb : {0, 1}) {
        if (ta && s[3] > 0 && s[4] == 0) continue;
        out.push_back({s[0], s[1], s[2], s[3], s[4], ta, tb});
      }
  return out;
}

// Outputs the GPU copies rather than computes (an embedding's rows) are exact; their gradients add up as usual.
Bounds exact_output(const Storage& s) {
  return {0, storage_bounds(s).gradient};
}

// A one-element float32 result of float32 math on the same stored values, whatever their storage: the
// cross-entropy's mean (rows summed in other orders, 1e-5), a reduction's total (summed in double on both
// backends and rounded once, 1e-6).
std::function<Bounds(const Storage&)> float32_result(double bound) {
  return [bound](const Storage& s) { return Bounds{bound, storage_bounds(s).gradient}; };
}

std::vector<OpCase> build_table() {
  std::vector<OpCase> t;

  // ---- elementwise: dims = the operands' shape ----
  t.push_back(OpCase("add", two_operands(), [](const auto& in, const Dims&) { return ops::add(in[0], in[1]); })
                  .gradcheck_at({{3, 5}})
                  .compare_at(kFlatSizes)
                  .time_at({{8192, 768}}));
  t.push_back(OpCase("sub", two_operands(), [](const auto& in, const Dims&) { return ops::sub(in[0], in[1]); })
                  .gradcheck_at({{4, 3}})
                  .compare_at(kFlatSizes)
                  .time_at({{8192, 768}}));
  t.push_back(OpCase("mul", two_operands(), [](const auto& in, const Dims&) { return ops::mul(in[0], in[1]); })
                  .gradcheck_at({{2, 7}})
                  .compare_at(kFlatSizes)
                  .time_at({{8192, 3072}}));
  t.push_back(OpCase("scale", one_operand(), [](const auto& in, const Dims&) { return ops::scale(in[0], -2.5); })
                  .gradcheck_at({{6}})
                  .compare_at(kFlatSizes)
                  .time_at({{8192, 768}}));
  // dims: x's shape; the bias is its last dim (its gradient is the kernels' sum over rows).
  t.push_back(OpCase(
                  "add_bias",
                  [](const Dims& d) {
                    return std::vector<Input>{activation("x", as_shape(d)), activation("bias", {d.back()})};
                  },
                  [](const auto& in, const Dims&) { return ops::add_bias(in[0], in[1]); })
                  .gradcheck_at({{2, 3, 5}})
                  .compare_at(row_shapes({1, 37, 5000}, {1, 7, 64, 1000, 1023, 4097}))
                  .time_at({{8192, 3072}}));
  t.push_back(OpCase("gelu", one_operand(normal(2.0)), [](const auto& in, const Dims&) { return ops::gelu(in[0]); })
                  .gradcheck_at({{5, 9}})
                  .compare_at(kFlatSizes)
                  .time_at({{8192, 3072}}));
  // silu(gate) * up; gates of scale 4 reach the sigmoid's flat ends.
  t.push_back(
      OpCase(
          "swiglu",
          [](const Dims& d) {
            return std::vector<Input>{activation("gate", as_shape(d), normal(4.0)), activation("up", as_shape(d))};
          },
          [](const auto& in, const Dims&) { return ops::swiglu(in[0], in[1]); })
          .gradcheck_at({{3, 5}})
          .compare_at(kFlatSizes)
          .time_at({{8192, 3072}})
          .counting_flops([](const Dims& d) { return 4.0 * static_cast<double>(d[0] * d[1]); }));
  // The cast to bf16 rounds f32 values the same way on both backends; its gradient is cast back. No f64 path.
  t.push_back(OpCase("cast_to_bf16", one_operand(uniform(-300, 300)),
                     [](const auto& in, const Dims&) { return ops::cast(in[0], DType::BF16); })
                  .compare_at({{5}, {1023}, {4099}})
                  .time_at({{8192, 768}})
                  .stored_as({{DType::F32, DType::F32}})
                  .within([](const Storage&) {
                    return Bounds{0, 0};
                  }));

  // ---- reductions: the GPU adds in double like the CPU, so both round the same total once ----
  const std::vector<Dims> reduce_sizes = {{1}, {1000}, {4097}, {(1 << 20) + 3}};
  t.push_back(OpCase("sum", one_operand(), [](const auto& in, const Dims&) { return ops::sum(in[0]); })
                  .gradcheck_at({{3, 4}})
                  .compare_at(reduce_sizes)
                  .time_at({{8192 * 3072}})
                  .within(float32_result(1e-6)));
  t.push_back(OpCase("mean", one_operand(), [](const auto& in, const Dims&) { return ops::mean(in[0]); })
                  .gradcheck_at({{3, 4}})
                  .compare_at(reduce_sizes)
                  .time_at({{8192 * 3072}})
                  .within(float32_result(1e-6)));

  // ---- matrix products ----
  // dims: m, k, n, a's batch, b's batch (0: 2-D), trans_a, trans_b.
  t.push_back(
      OpCase(
          "matmul",
          [](const Dims& d) {
            const int64_t m = d[0], k = d[1], n = d[2];
            return std::vector<Input>{
                activation("a", d[5] ? matmul_operand(d[3], k, m) : matmul_operand(d[3], m, k), uniform(-1, 1)),
                activation("b", d[6] ? matmul_operand(d[4], n, k) : matmul_operand(d[4], k, n), uniform(-1, 1))};
          },
          [](const auto& in, const Dims& d) { return ops::matmul(in[0], in[1], d[5] != 0, d[6] != 0); })
          .gradcheck_at(concat_dims({matmul_layouts({{3, 4, 5, 0, 0}}),
                                     {{3, 4, 5, 2, 2, 0, 0}, {3, 4, 5, 2, 2, 0, 1}},
                                     {{3, 4, 5, 2, 0, 0, 0}, {3, 4, 5, 2, 0, 0, 1}}}))
          .compare_at(matmul_layouts({{37, 65, 1023, 0, 0},
                                      {1, 1, 1, 0, 0},
                                      {64, 96, 4097, 0, 0},
                                      {37, 33, 129, 3, 0},
                                      {65, 17, 31, 4, 4},
                                      {5, 1, 1000, 2, 2}}))
          .time_at({{8192, 768, 2304, 0, 0, 0, 0}})
          .counting_flops([](const Dims& d) {
            return 2.0 * static_cast<double>(d[0] * d[1] * d[2] * std::max<int64_t>({d[3], d[4], 1}));
          }));
  // dims: x's batch (0: 2-D x), rows, in features, out features, with a bias (1) or none (0).
  t.push_back(OpCase(
                  "linear",
                  [](const Dims& d) {
                    std::vector<Input> in = {activation("x", matmul_operand(d[0], d[1], d[2]), uniform(-1, 1)),
                                             weight("weight", {d[3], d[2]}, uniform(-1, 1))};
                    if (d[4]) in.push_back(weight("bias", {d[3]}, uniform(-1, 1)));
                    return in;
                  },
                  [](const auto& in, const Dims& d) { return ops::linear(in[0], in[1], d[4] ? in[2] : Tensor()); })
                  .gradcheck_at({{2, 3, 4, 5, 1}, {0, 3, 4, 2, 0}})
                  .compare_at({{0, 37, 65, 129, 1}, {2, 33, 64, 96, 1}, {0, 37, 1023, 65, 0}})
                  .time_at({{0, 8192, 768, 2304, 1}})
                  .counting_flops([](const Dims& d) {
                    return 2.0 * static_cast<double>(std::max<int64_t>(d[0], 1) * d[1] * d[2] * d[3]);
                  }));

  // gelu(x W^T + b) in one node (the GPU's bias + GELU epilogue). dims as for linear. Widths that are multiples of 8
  // take cuBLASLt's epilogue on the GPU; 65 and the bias-free case take its fallback (product, add_bias, gelu).
  t.push_back(OpCase(
                  "linear_gelu",
                  [](const Dims& d) {
                    std::vector<Input> in = {activation("x", matmul_operand(d[0], d[1], d[2]), uniform(-1, 1)),
                                             weight("weight", {d[3], d[2]}, uniform(-1, 1))};
                    if (d[4]) in.push_back(weight("bias", {d[3]}, uniform(-1, 1)));
                    return in;
                  },
                  [](const auto& in, const Dims& d) { return ops::linear_gelu(in[0], in[1], d[4] ? in[2] : Tensor()); })
                  .gradcheck_at({{2, 3, 4, 5, 1}, {0, 3, 4, 2, 0}})
                  .compare_at({{0, 37, 64, 128, 1}, {2, 33, 64, 96, 1}, {0, 37, 1023, 65, 1}, {0, 64, 128, 256, 0}})
                  .time_at({{0, 8192, 768, 3072, 1}})
                  .counting_flops([](const Dims& d) {
                    return 2.0 * static_cast<double>(std::max<int64_t>(d[0], 1) * d[1] * d[2] * d[3]);
                  }));

  // ---- normalisation and softmax over the last dim ----
  // dims: rows, cols, with a bias (1) or none (0). Weights near 1, as trained ones are.
  t.push_back(OpCase(
                  "layer_norm",
                  [](const Dims& d) {
                    std::vector<Input> in = {activation("x", {d[0], d[1]}, normal(3.0)),
                                             weight("weight", {d[1]}, uniform(0.5, 1.5))};
                    if (d[2]) in.push_back(weight("bias", {d[1]}, uniform(-2, 2)));
                    return in;
                  },
                  [](const auto& in, const Dims& d) { return ops::layer_norm(in[0], in[1], d[2] ? in[2] : Tensor()); })
                  .gradcheck_at({{4, 7, 1}, {3, 6, 0}})
                  .compare_at(with_flag(kNormShapes, {1, 0}))
                  .time_at({{8192, 768, 1}})
                  .stored_as({{DType::F32, DType::F32}, {DType::BF16, DType::BF16}, {DType::BF16, DType::F32}}));
  // dims: rows, cols. One column is left to the kernel test (its dx cancels two nearly equal numbers).
  t.push_back(OpCase(
                  "rms_norm",
                  [](const Dims& d) {
                    return std::vector<Input>{activation("x", {d[0], d[1]}, normal(2.0)),
                                              weight("weight", {d[1]}, uniform(0.5, 1.5))};
                  },
                  [](const auto& in, const Dims&) { return ops::rms_norm(in[0], in[1]); })
                  .gradcheck_at({{4, 7}})
                  .compare_at({kNormShapes.begin() + 1, kNormShapes.end()})
                  .time_at({{8192, 768}})
                  .stored_as({{DType::F32, DType::F32}, {DType::BF16, DType::BF16}, {DType::BF16, DType::F32}}));
  // The residual add + norm of a pre-norm block. dims: rows, cols, with a bias (1) or none (0) for the LayerNorm,
  // and which outputs the result reads: 1 = sum + 1.5 normed (the stream's gradient from the add reaches the norm's
  // backward kernel and is folded into it), 0 = normed alone (nothing to fold).
  const auto residual_inputs = [](const Dims& d, bool with_bias) {
    std::vector<Input> in = {activation("x", {d[0], d[1]}, normal(2.0)), activation("r", {d[0], d[1]}, normal(1.0)),
                             weight("weight", {d[1]}, uniform(0.5, 1.5))};
    if (with_bias) in.push_back(weight("bias", {d[1]}, uniform(-2, 2)));
    return in;
  };
  const auto read_outputs = [](const ops::ResidualNorm& o, bool both) {
    return both ? ops::add(o.sum, ops::scale(o.normed, 1.5)) : o.normed;
  };
  t.push_back(OpCase(
                  "add_layer_norm", [residual_inputs](const Dims& d) { return residual_inputs(d, d[2] != 0); },
                  [read_outputs](const auto& in, const Dims& d) {
                    return read_outputs(ops::add_layer_norm(in[0], in[1], in[2], d[2] ? in[3] : Tensor()), d[3] != 0);
                  })
                  .gradcheck_at({{4, 7, 1, 1}, {3, 6, 0, 1}, {3, 5, 1, 0}})
                  .compare_at(concat_dims({with_flag(with_flag(kNormShapes, {1}), {1}),
                                           {{37, 64, 0, 1}, {37, 7, 1, 0}, {300, 768, 1, 0}, {37, 1023, 0, 0}}}))
                  .time_at({{8192, 768, 1, 1}})
                  .stored_as({{DType::F32, DType::F32}, {DType::BF16, DType::BF16}, {DType::BF16, DType::F32}}));
  t.push_back(OpCase(
                  "add_rms_norm", [residual_inputs](const Dims& d) { return residual_inputs(d, false); },
                  [read_outputs](const auto& in, const Dims& d) {
                    return read_outputs(ops::add_rms_norm(in[0], in[1], in[2]), d[2] != 0);
                  })
                  .gradcheck_at({{4, 7, 1}, {3, 5, 0}})
                  .compare_at(concat_dims(
                      {with_flag({kNormShapes.begin() + 1, kNormShapes.end()}, {1}), {{37, 7, 0}, {300, 768, 0}}}))
                  .time_at({{8192, 768, 1}})
                  .stored_as({{DType::F32, DType::F32}, {DType::BF16, DType::BF16}, {DType::BF16, DType::F32}}));
  // dims: rows, cols, the row that is all -inf (-1: none; the CPU gives zeros for it, not NaN).
  t.push_back(OpCase(
                  "softmax",
                  [](const Dims& d) {
                    Draw draw = d[2] >= 0 ? uniform(-4, 4) : normal(2.0);
                    draw.minus_inf_row = d[2];
                    return std::vector<Input>{activation("x", {d[0], d[1]}, draw)};
                  },
                  [](const auto& in, const Dims&) { return ops::softmax(in[0]); })
                  .gradcheck_at({{3, 8, -1}})
                  .compare_at(row_shapes({37}, {1, 7, 1000, 1023, 4097}, {5}))
                  .time_at({{8 * 12 * 128, 1024, -1}}));

  // ---- attention ----
  // dims: B, T, heads, head dim; qkv [B, T, 3 C].
  t.push_back(
      OpCase(
          "causal_self_attention",
          [](const Dims& d) {
            return std::vector<Input>{activation("qkv", {d[0], d[1], 3 * d[2] * d[3]})};
          },
          [](const auto& in, const Dims& d) { return ops::causal_self_attention(in[0], static_cast<int>(d[2])); })
          .gradcheck_at({{2, 1, 2, 3}, {2, 5, 2, 3}})
          .compare_at({{2, 1, 2, 8}, {2, 65, 3, 16}, {1, 64, 2, 64}, {2, 33, 2, 7}, {1, 130, 4, 32}})
          .time_at({{8, 1024, 12, 64}})
          .counting_flops([](const Dims& d) { return 4.0 * static_cast<double>(d[0] * d[2] * d[1] * d[1] * d[3]); }));

  // dims: B, T, query heads, key/value heads, head dim; q [B, T, H D], k and v [B, T, KV D].
  t.push_back(
      OpCase(
          "causal_attention",
          [](const Dims& d) {
            return std::vector<Input>{activation("q", {d[0], d[1], d[2] * d[4]}),
                                      activation("k", {d[0], d[1], d[3] * d[4]}),
                                      activation("v", {d[0], d[1], d[3] * d[4]})};
          },
          [](const auto& in, const Dims& d) {
            return ops::causal_attention(in[0], in[1], in[2], static_cast<int>(d[2]), static_cast<int>(d[3]));
          })
          .gradcheck_at({{2, 5, 4, 2, 3}, {2, 4, 4, 1, 2}, {1, 3, 2, 2, 2}})
          .compare_at({{2, 1, 4, 2, 8},
                       {2, 65, 4, 1, 16},
                       {1, 64, 8, 2, 64},
                       {2, 33, 4, 2, 7},
                       {1, 130, 8, 2, 128},
                       {1, 40, 4, 4, 256}})
          .time_at({{8, 1024, 32, 8, 64}, {8, 1024, 16, 4, 128}})
          .counting_flops([](const Dims& d) { return 4.0 * static_cast<double>(d[0] * d[2] * d[1] * d[1] * d[4]); }));
  // dims: B, T, heads, head dim, positions drawn below this. inv_freq is an input without a gradient (the model
  // computes it); the op takes it in f32.
  t.push_back(OpCase(
                  "rotary_embedding",
                  [](const Dims& d) {
                    return std::vector<Input>{activation("x", {d[0], d[1], d[2] * d[3]}),
                                              id_input("positions", {d[0], d[1]}, ids(d[4])),
                                              Input{"inv_freq", {d[3] / 2}, uniform(0, 1), false, true}};
                  },
                  [](const auto& in, const Dims& d) {
                    const Tensor freq = in[2].dtype() == DType::F32 ? in[2] : in[2].to(DType::F32);
                    return ops::rotary_embedding(in[0], in[1], freq, d[3]);
                  })
                  .gradcheck_at({{2, 3, 2, 4, 50}})
                  .compare_at({{2, 7, 3, 8, 100}, {1, 33, 4, 64, 70000}, {2, 5, 2, 128, 131072}})
                  .time_at({{8, 1024, 32, 128, 1024}}));

  // ---- embeddings ----
  // dims: vocabulary, columns, the ids' shape [n0, n1].
  t.push_back(
      OpCase(
          "embedding",
          [](const Dims& d) {
            return std::vector<Input>{activation("table", {d[0], d[1]}), id_input("ids", {d[2], d[3]}, ids(d[0]))};
          },
          [](const auto& in, const Dims&) { return ops::embedding(in[0], in[1]); })
          .gradcheck_at({{5, 4, 2, 3}})
          .compare_at({{1000, 1, 37, 1}, {1000, 7, 37, 1}, {1000, 64, 37, 1}, {1000, 768, 37, 1}, {1000, 1023, 37, 1}})
          .time_at({{50257, 768, 8, 1024}})
          .within(exact_output));
  // dims: first row, rows, the whole vocabulary, columns, ids. Ids of other shards give zero rows, no gradient.
  t.push_back(OpCase(
                  "embedding_shard",
                  [](const Dims& d) {
                    return std::vector<Input>{activation("table", {d[1], d[3]}), id_input("ids", {d[4]}, ids(d[2]))};
                  },
                  [](const auto& in, const Dims& d) { return ops::embedding_shard(in[0], in[1], d[0], d[2]); })
                  .gradcheck_at({{2, 3, 6, 4, 7}})
                  .compare_at({{250, 250, 1000, 1, 37},
                               {250, 250, 1000, 7, 37},
                               {250, 250, 1000, 64, 37},
                               {250, 250, 1000, 768, 37},
                               {250, 250, 1000, 1023, 37}})
                  .time_at({{25128, 25129, 50257, 768, 8192}})
                  .within(exact_output));

  // ---- what the tape must get right ----
  // A view in the middle of a graph: its gradient is reshaped back. dims: x's shape, viewed transposed.
  t.push_back(OpCase("reshape", one_operand(),
                     [](const auto& in, const Dims& d) {
                       return ops::gelu(ops::reshape(in[0], {d[1], d[0]}));
                     })
                  .gradcheck_at({{2, 6}})
                  .compare_at({{37, 1023}}));
  // y = x * x + x: the gradients through both uses must add up.
  t.push_back(OpCase("shared_input", one_operand(),
                     [](const auto& in, const Dims&) { return ops::add(ops::mul(in[0], in[0]), in[0]); })
                  .gradcheck_at({{5}})
                  .compare_at({{1000}}));
  return t;
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> table = build_table();
  return table;
}

}  // namespace retort::op_testing
