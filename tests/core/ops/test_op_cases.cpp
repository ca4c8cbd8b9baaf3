// The core op table (op_cases.h) as tests. Every op with an f64 path: its gradient against central finite
// differences in float64 on the CPU. Every op on a GPU: its output and the gradient of every differentiable input
// against the CPU on the very values the GPU holds (in float32 there), f32 and bf16 storage (and the mixed
// storages a case lists), inputs at the start of their allocation and one element off it; skipped without a GPU.
// The CPU's bf16 storage against its float32 results, held to the same bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/tensor/device.h"
#include "core/tensor/tensor.h"
#include "tests/core/gradcheck.h"
#include "tests/core/ops/op_cases.h"
#include "tests/core/relative_error.h"

namespace retort::op_testing {
namespace {

const OpCase& case_named(const std::string& name) {
  for (const OpCase& c : op_cases())
    if (c.name == name) return c;
  throw std::runtime_error("no op case named " + name);
}

// The names of the cases that have runs for one use of the table.
std::vector<std::string> cases_with(std::vector<Dims> OpCase::*runs) {
  std::vector<std::string> names;
  for (const OpCase& c : op_cases())
    if (!(c.*runs).empty()) names.push_back(c.name);
  return names;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// ---- float64 finite differences -----------------------------------------------------------------------------------

class OpGradcheck : public ::testing::TestWithParam<std::string> {};

TEST_P(OpGradcheck, MatchesCentralDifferences) {
  const OpCase& c = case_named(GetParam());
  for (const Dims& d : c.gradcheck) {
    SCOPED_TRACE(c.name + " " + dims_str(d));
    const std::vector<Input> inputs = c.inputs(d);
    const auto drawn = draw_inputs(inputs, run_seed(c.name, d, "gradcheck"));
    retort::testing::expect_gradients_match([&](const std::vector<Tensor>& in) { return c.op(in, d); },
                                            make_inputs_as(inputs, drawn, DType::F64, Device::cpu(), true),
                                            c.gradcheck_tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpGradcheck, ::testing::ValuesIn(cases_with(&OpCase::gradcheck)), param_name);

// ---- a GPU against the CPU ------------------------------------------------------------------------------------------

using retort::testing::relative_error;

// Checks one comparison; a GPU's are logged too ("[op-err]" lines, collected for the GPU validation notes).
void expect_close(const std::string& what, const Tensor& out, const Tensor& ref, double bound) {
  const double err = relative_error(out, ref);
  if (out.device().is_cuda()) std::printf("[op-err] %-72s %.3e (bound %.0e)\n", what.c_str(), err, bound);
  EXPECT_LE(err, bound) << what;
}

// Fills the device's stream-ordered pool with NaN and hands the memory back just before a GPU pass, so that an
// element a kernel leaves unwritten most likely reads NaN, which no bound accepts (the kernel tests poison their
// outputs explicitly; here the op allocates them).
void dirty_device_pool(Device gpu, int64_t bytes) {
  Tensor::full({bytes / 4 + 1}, std::numeric_limits<double>::quiet_NaN(), DType::F32, gpu);
}

// The drawn values as the storage keeps them (bf16 rounds): what the CPU gets, in float32.
std::vector<DrawnInput> as_stored(const std::vector<Input>& inputs, std::vector<DrawnInput> drawn,
                                  const Storage& storage) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].is_ids()) continue;
    const DType dtype = inputs[k].parameter ? storage.parameters : storage.activations;
    auto& v = drawn[k].values;
    v = Tensor::from_doubles(v, {static_cast<int64_t>(v.size())}, dtype).to_doubles();
  }
  return drawn;
}

std::string storage_str(const Storage& s) {
  const std::string a(dtype_name(s.activations)), p(dtype_name(s.parameters));
  return a == p ? a : a + " (parameters " + p + ")";
}

bool holds_bf16(const Storage& s) {
  return s.activations == DType::BF16 || s.parameters == DType::BF16;
}

// Case c on `device` against the CPU in float32 on the same stored values, for each of its storages that
// `storage_wanted` takes and each alignment in `misalignments`: the output and every differentiable input's
// gradient within the case's bounds. The inputs' values and the output gradient are drawn once per dims.
void expect_matches_cpu_in_float32(const OpCase& c, Device device,
                                   const std::function<bool(const Storage&)>& storage_wanted,
                                   const std::vector<bool>& misalignments) {
  const std::string where = device.is_cuda() ? "GPU" : "device";
  for (const Dims& d : c.compare) {
    const std::vector<Input> inputs = c.inputs(d);
    const auto drawn = draw_inputs(inputs, run_seed(c.name, d, "compare"));
    int64_t input_bytes = 0;
    for (const Input& in : inputs) input_bytes += shape_numel(in.shape) * 4;
    for (const Storage& storage : c.storages) {
      if (!storage_wanted(storage)) continue;
      for (bool misaligned : misalignments) {
        const std::string tag = c.name + " " + dims_str(d) + " " + storage_str(storage) + " on " + device.str() +
                                (misaligned ? " misaligned" : "");
        SCOPED_TRACE(tag);
        const Bounds bounds = c.bounds(storage);
        std::vector<Tensor> on_device = make_inputs(inputs, drawn, storage, device, misaligned, true);
        std::vector<Tensor> on_cpu =
            make_inputs_as(inputs, as_stored(inputs, drawn, storage), DType::F32, Device::cpu(), true);

        if (device.is_cuda()) dirty_device_pool(device, 4 * input_bytes);
        Tensor out = c.op(on_device, d);
        Tensor cpu_out = c.op(on_cpu, d);
        expect_close(tag + " output", out, cpu_out, bounds.output);

        // One output gradient for both, as the device's output dtype stores it.
        std::mt19937_64 rng(run_seed(c.name, d, "upstream"));
        std::uniform_real_distribution<double> dist(-2, 2);
        std::vector<double> upstream(static_cast<size_t>(cpu_out.numel()));
        for (double& v : upstream) v = dist(rng);
        upstream = Tensor::from_doubles(upstream, cpu_out.shape(), out.dtype()).to_doubles();
        if (device.is_cuda()) dirty_device_pool(device, 4 * input_bytes);
        out.backward(Tensor::from_doubles(upstream, out.shape(), out.dtype(), device));
        cpu_out.backward(Tensor::from_doubles(upstream, cpu_out.shape(), cpu_out.dtype()));
        for (size_t k = 0; k < inputs.size(); ++k) {
          if (!on_cpu[k].requires_grad()) continue;
          ASSERT_TRUE(on_device[k].grad().defined()) << inputs[k].name << " got no gradient on the " << where;
          ASSERT_TRUE(on_cpu[k].grad().defined()) << inputs[k].name << " got no gradient on the CPU";
          expect_close(tag + " d" + inputs[k].name, on_device[k].grad(), on_cpu[k].grad(), bounds.gradient);
        }
      }
    }
  }
}

// Every storage, inputs at the start of their allocation and one element off it.
class OpCudaVsCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(OpCudaVsCpu, OutputAndInputGradientsMatch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  expect_matches_cpu_in_float32(case_named(GetParam()), Device::cuda(0), [](const Storage&) { return true; },
                                {false, true});
}

INSTANTIATE_TEST_SUITE_P(Ops, OpCudaVsCpu, ::testing::ValuesIn(cases_with(&OpCase::compare)), param_name);

// The CPU's own bf16 storage (float math, results rounded to bf16) against its float32 results, by the same
// comparison and bounds the GPU is held to; it also keeps that comparison exercised where there is no GPU.
std::vector<std::string> cases_stored_in_bf16() {
  std::vector<std::string> names;
  for (const OpCase& c : op_cases())
    if (!c.compare.empty() && std::any_of(c.storages.begin(), c.storages.end(), holds_bf16)) names.push_back(c.name);
  return names;
}

class OpBf16VsF32Cpu : public ::testing::TestWithParam<std::string> {};

TEST_P(OpBf16VsF32Cpu, OutputAndInputGradientsMatch) {
  expect_matches_cpu_in_float32(case_named(GetParam()), Device::cpu(), holds_bf16, {false});
}

INSTANTIATE_TEST_SUITE_P(Ops, OpBf16VsF32Cpu, ::testing::ValuesIn(cases_stored_in_bf16()), param_name);

}  // namespace
}  // namespace retort::op_testing
