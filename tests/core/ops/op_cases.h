#pragma once
// The core op table, after ggml's test-backend-ops: one declarative case per differentiable op of core/ops/ops.h
// (and the compositions whose backward the tape must get right), saying the op's inputs (shapes, which dtype
// each is stored in, how its values are drawn), the op call, its tolerances, and the shapes each use of the table
// runs it at. One table drives
//   - the comparison of every op's output and input gradients on a GPU against the CPU on the same stored values
//     (test_op_cases.cpp; skipped without a GPU),
//   - central finite-difference gradient checks in float64 on the CPU, for the ops with an f64 path
//     (test_op_cases.cpp),
//   - a timing table of each op's forward and backward at GPT-2 small's shapes, which asserts nothing: the
//     retort_op_timing executable (op_timing_main.cpp).
// No test framework here: the timing executable links this file too.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace retort::op_testing {

// The sizes one run of an op is drawn at; what each entry means is the case's own (its comment says).
using Dims = std::vector<int64_t>;

// How an input's values are drawn.
struct Draw {
  enum class Kind { Normal, Uniform, Ids };
  Kind kind = Kind::Normal;
  double a = 1.0, b = 0.0;     // Normal: standard deviation a; Uniform: [a, b); Ids: ids in [0, a)
  int ignore_every = 0;        // Ids: rows i % ignore_every == 1 hold -100 (the ignored target); 0: none
  int64_t minus_inf_row = -1;  // Normal / Uniform: this row of the [rows, last dim] matrix is all -inf
};

inline Draw normal(double scale = 1.0) {
  return {Draw::Kind::Normal, scale, 0.0};
}
inline Draw uniform(double lo, double hi) {
  return {Draw::Kind::Uniform, lo, hi};
}
// Ids in [0, limit), every fourth one repeating its predecessor (a backward pass must add repeats up).
inline Draw ids(int64_t limit, int ignore_every = 0) {
  return {Draw::Kind::Ids, static_cast<double>(limit), 0.0, ignore_every};
}

struct Input {
  std::string name;
  Shape shape;
  Draw draw;
  bool differentiable = true;  // its gradient is checked (float inputs only)
  bool parameter = false;      // stored in a storage's parameter dtype (a norm's weights may stay f32 under bf16)

  bool is_ids() const { return draw.kind == Draw::Kind::Ids; }
};

// The dtypes the GPU comparison stores the float inputs in: activations, and the inputs marked `parameter`.
struct Storage {
  DType activations = DType::F32;
  DType parameters = DType::F32;
};

// Bounds on the relative L2 error (||gpu - cpu|| / ||cpu||) of the GPU's output and input gradients against the
// CPU's float32 results on the same stored values.
struct Bounds {
  double output = 0, gradient = 0;
};

// 1e-5 when every float input is f32 (float32 math on both sides, summed in other orders), 1e-2 when one is
// stored in bf16 (the GPU rounds its results to bf16, unit roundoff 2^-8; the CPU's float32 results are not).
Bounds storage_bounds(const Storage& s);

// One op: its name, its inputs at given dims (in the op's argument order), the op call, and then, set in a chain
// (OpCase("gelu", ...).gradcheck_at(...).compare_at(...)), the dims each use of the table runs it at and what it
// needs beyond the defaults.
struct OpCase {
  using InputsAt = std::function<std::vector<Input>(const Dims&)>;
  using Call = std::function<Tensor(const std::vector<Tensor>&, const Dims&)>;

  OpCase(std::string name, InputsAt inputs, Call op)
      : name(std::move(name)), inputs(std::move(inputs)), op(std::move(op)) {}

  OpCase& gradcheck_at(std::vector<Dims> dims) { return set(gradcheck, std::move(dims)); }
  OpCase& compare_at(std::vector<Dims> dims) { return set(compare, std::move(dims)); }
  OpCase& time_at(std::vector<Dims> dims) { return set(timing, std::move(dims)); }
  OpCase& stored_as(std::vector<Storage> s) { return set(storages, std::move(s)); }
  OpCase& within(std::function<Bounds(const Storage&)> b) { return set(bounds, std::move(b)); }
  OpCase& counting_flops(std::function<double(const Dims&)> f) { return set(flops, std::move(f)); }

  std::string name;
  InputsAt inputs;
  Call op;
  std::vector<Dims> gradcheck;  // f64 finite differences on the CPU; none: the op has no f64 path
  std::vector<Dims> compare;    // GPU against the CPU
  std::vector<Dims> timing;     // the timing table (GPT-2 small: B 8, T 1024, C 768, V 50257, 12 heads)
  std::vector<Storage> storages = {{DType::F32, DType::F32}, {DType::BF16, DType::BF16}};
  std::function<Bounds(const Storage&)> bounds = storage_bounds;
  std::function<double(const Dims&)> flops;  // floating-point operations of the forward, for the timing table
  double gradcheck_tolerance = 1e-6;         // of max |analytic - numeric| / max |numeric|

 private:
  template <typename T>
  OpCase& set(T& field, T value) {
    field = std::move(value);
    return *this;
  }
};

// The table.
const std::vector<OpCase>& op_cases();

// "37x1023": a run's dims as part of a name.
std::string dims_str(const Dims& d);

// A run's input values, drawn from `seed`: float inputs as doubles (stored in a dtype later), ids as i32.
struct DrawnInput {
  std::vector<double> values;
  std::vector<int32_t> ids;
};
std::vector<DrawnInput> draw_inputs(const std::vector<Input>& inputs, uint64_t seed);

// The stored tensors of drawn inputs on `device`: float inputs in the storage's dtype for their kind (or in
// `override_dtype` for all of them when it is set), ids as i32. With `misaligned` every float input starts one
// element into its allocation, off the 16-byte boundary the vectorised kernel paths need. The differentiable
// float inputs require a gradient when `requires_grad`.
std::vector<Tensor> make_inputs(const std::vector<Input>& inputs, const std::vector<DrawnInput>& drawn,
                                const Storage& storage, Device device, bool misaligned, bool requires_grad);
std::vector<Tensor> make_inputs_as(const std::vector<Input>& inputs, const std::vector<DrawnInput>& drawn, DType dtype,
                                   Device device, bool requires_grad);

// A deterministic seed for one run of a case (its name, dims and a purpose tag).
uint64_t run_seed(const std::string& name, const Dims& dims, const std::string& purpose);

}  // namespace retort::op_testing
