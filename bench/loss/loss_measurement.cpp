#include "bench/loss/loss_measurement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "bench/harness/rank_reduction.h"
#include "bench/harness/sample_stats.h"
#include "bench/loss/loss_variants.h"
#include "core/kernels/kernels.h"
#include "core/tensor/device_runtime.h"
#include "core/util/error.h"

namespace retort::bench {
namespace {

// An allocation that failed, from retort's allocator, a CUDA call or cuBLAS.
bool is_out_of_memory(const std::exception& e) {
  const std::string_view text = e.what();
  return text.find("out of GPU memory") != std::string_view::npos ||
         text.find("out of memory") != std::string_view::npos || text.find("ALLOC_FAILED") != std::string_view::npos;
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// A gradient on the host, bf16 or f32 as the variant computed it, for the comparison between variants.
Tensor host_copy(const Tensor& grad) {
  const Tensor g = grad.dtype() == DType::BF16 || grad.dtype() == DType::F32 ? grad : grad.to(DType::F32);
  return g.to(Device::cpu());
}

float element(const Tensor& host, int64_t i) {
  if (host.dtype() == DType::F32) return host.data<float>()[i];
  const uint32_t bits = static_cast<uint32_t>(host.data<uint16_t>()[i]) << 16;  // bf16: the top half of an f32
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  RETORT_CHECK(a.numel() == b.numel(), "gradients of {} and {} elements", a.numel(), b.numel());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::abs(static_cast<double>(element(a, i)) - static_cast<double>(element(b, i)));
    if (!(d <= worst)) worst = d;  // NaN wins
  }
  return worst;
}

}  // namespace

LossMeasurement::LossMeasurement(const LossBenchOptions& options, const LossRun& run,
                                 std::function<void(const LossResult&)> report)
    : o_(options), run_(run), report_(std::move(report)), timer_(run.device), meter_(run.device) {
  one_ = Tensor::full({}, 1.0, DType::F32, run.device);
}

double LossMeasurement::copy_gbps(int64_t bytes) {
  Tensor src = Tensor::zeros({bytes / 4}, DType::F32, run_.device);
  Tensor dst = Tensor::empty({bytes / 4}, DType::F32, run_.device);
  auto copy = [&] { device_runtime::copy(dst.raw_data(), run_.device, src.raw_data(), run_.device, src.nbytes()); };
  for (int i = 0; i < 3; ++i) copy();
  std::vector<double> ms;
  for (int i = 0; i < 10; ++i) ms.push_back(timer_.ms(copy));
  const double worst = slowest_rank(run_.world.get(), median(ms));
  return 2.0 * static_cast<double>(src.nbytes()) / (worst / 1e3) / 1e9;
}

std::vector<LossResult> LossMeasurement::run_group(LossKind kind, const std::string& loss_name, int64_t vocab,
                                                   const std::vector<std::string>& variants) {
  const int64_t vocab_local = vocab / run_.tp;
  const double logits_bytes = static_cast<double>(run_.tokens * vocab_local * 2);  // bf16
  auto blank = [&](const std::string& variant) {
    LossResult r;
    r.loss = loss_name;
    r.variant = variant;
    r.vocab = vocab;
    r.logits_bytes = logits_bytes;
    r.bytes = logits_bytes * (is_kl(kind) ? 5 : 3);  // 2 reads (+ 2 teacher reads) + 1 gradient write
    return r;
  };
  std::vector<LossResult> out;
  std::optional<LossInputs> inputs;
  std::string input_error;
  try {
    inputs = make_loss_inputs(run_, o_, kind, vocab);
  } catch (const Error& e) {
    if (!is_out_of_memory(e)) throw;
    input_error = fmt::format("inputs: {}", e.what());
  }
  if (any_rank(run_.world.get(), !inputs.has_value())) {
    inputs.reset();
    for (const auto& variant : variants) {
      LossResult r = blank(variant);
      r.oom = true;
      r.error = input_error.empty() ? "inputs: out of memory on another rank" : input_error;
      out.push_back(r);
      report_(r);
    }
    return out;
  }
  std::optional<Tensor> reference;
  for (const auto& variant : variants) {
    LossResult r = blank(variant);
    measure(kind, variant, *inputs, r, reference);
    out.push_back(r);
    report_(r);
  }
  return out;
}

void LossMeasurement::measure(LossKind kind, const std::string& variant, const LossInputs& in, LossResult& r,
                              std::optional<Tensor>& reference) {
  std::vector<double> times;
  double extra = -1, sum_squares = 0, diff = -1;
  std::string error;
  try {
    if (contains(o_.simulate_oom, variant))
      throw Error(fmt::format("out of GPU memory (simulated by --simulate-oom {})", variant));
    const LossStep step = make_loss_step(variant, run_, in, kind, one_);
    for (int i = 0; i < o_.warmup; ++i) step();
    for (int i = 0; i < o_.iters; ++i) {
      if (run_.comm) run_.comm->barrier();  // no rank's clock starts while it waits for a late peer
      times.push_back(timer_.ms([&] { step(); }));
    }
    // One more step for the memory peak, the loss and the gradient.
    meter_.start();
    const StepOut result = step();
    extra = meter_.extra();
    r.loss_value = result.loss.item();
    Tensor squares = Tensor::empty({1}, DType::F32, run_.device);
    kernels::sum_squares(result.grad, squares);
    sum_squares = squares.item();
    if (o_.check_grads && run_.tp > 1) {
      Tensor mine = host_copy(result.grad);
      if (reference) {
        diff = max_abs_diff(*reference, mine);
      } else {
        reference = std::move(mine);
      }
    }
  } catch (const Error& e) {
    if (!is_out_of_memory(e)) throw;
    error = e.what();
    times.clear();
    device_runtime::synchronize(run_.device);
  }
  if (any_rank(run_.world.get(), !error.empty())) {
    r.oom = true;
    r.error = error.empty() ? "out of memory on another rank" : error;
    return;
  }
  const SampleSummary mine = summarize(times);
  const auto worst = slowest_rank(run_.world.get(), {mine.median, mine.min, mine.mean, extra, diff});
  r.median_ms = worst[0];
  r.min_ms = worst[1];
  r.mean_ms = worst[2];
  r.extra_bytes = worst[3];
  r.grad_max_diff = worst[4];
  r.grad_norm = std::sqrt(reduce_over_ranks(run_.world.get(), {sum_squares}, ReduceOp::Sum)[0]);
}

}  // namespace retort::bench
