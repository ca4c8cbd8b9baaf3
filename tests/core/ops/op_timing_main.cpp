// retort_op_timing: the timing mode of the core op table (op_cases.h). For every case, or those whose name holds
// --filter, at its timing shapes (GPT-2 small), the median of --runs runs of the forward and of the backward on
// the GPU when there is one (bf16 storage, as training runs) or else on the CPU (f32), as a table. It reads
// times; it never judges them: the exit status says only whether every op ran.
//
//   retort_op_timing [--runs N] [--warmup N] [--filter NAME] [--device cpu|cuda] [--dtype f32|bf16]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "bench/harness/sample_stats.h"
#include "bench/harness/step_timer.h"
#include "core/tensor/device.h"
#include "core/tensor/device_runtime.h"
#include "core/tensor/tensor.h"
#include "tests/core/ops/op_cases.h"

namespace retort::op_testing {
namespace {

struct Settings {
  int runs = 0, warmup = 3;
  std::string filter;
  Device device = Device::cpu();
  DType dtype = DType::F32;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: retort_op_timing [--runs N] [--warmup N] [--filter NAME] [--device cpu|cuda] "
               "[--dtype f32|bf16]\n",
               why);
  std::exit(2);
}

Settings parse(int argc, char** argv) {
  Settings s;
  s.device = cuda_available() ? Device::cuda(0) : Device::cpu();
  bool dtype_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(("missing a value after " + arg).c_str());
    const std::string value = argv[++i];
    if (arg == "--runs") {
      s.runs = std::atoi(value.c_str());
    } else if (arg == "--warmup") {
      s.warmup = std::atoi(value.c_str());
    } else if (arg == "--filter") {
      s.filter = value;
    } else if (arg == "--device") {
      if (value != "cpu" && value != "cuda") usage("--device takes cpu or cuda");
      s.device = value == "cuda" ? Device::cuda(0) : Device::cpu();
    } else if (arg == "--dtype") {
      s.dtype = dtype_from_name(value);
      dtype_given = true;
    } else {
      usage(("unknown option " + arg).c_str());
    }
  }
  if (!dtype_given) s.dtype = s.device.is_cuda() ? DType::BF16 : DType::F32;
  // GPT-2 small's shapes take seconds per op on a CPU: fewer runs there unless asked.
  if (s.runs <= 0) s.runs = s.device.is_cuda() ? 20 : 3;
  return s;
}

// The storage a case times in: the asked dtype for activations and parameters where the case takes it, else the
// case's first storage (the cast starts from f32).
Storage timing_storage(const OpCase& c, DType dtype) {
  for (const Storage& s : c.storages)
    if (s.activations == dtype && s.parameters == dtype) return s;
  return c.storages.front();
}

struct Timing {
  double forward_ms = 0, backward_ms = 0, bytes = 0, flops = 0;
};

Timing time_op(const OpCase& c, const Dims& d, const Settings& s) {
  const std::vector<Input> inputs = c.inputs(d);
  std::vector<Tensor> in = make_inputs(inputs, draw_inputs(inputs, run_seed(c.name, d, "timing")),
                                       timing_storage(c, s.dtype), s.device, false, true);
  bench::StepTimer timer(s.device);
  std::vector<double> forward, backward;
  Timing t;
  for (int run = 0; run < s.warmup + s.runs; ++run) {
    for (Tensor& x : in) x.zero_grad();
    Tensor y;
    const double f = timer.ms([&] { y = c.op(in, d); });
    const Tensor upstream = Tensor::full(y.shape(), 0.5, y.dtype(), s.device);
    const double b = timer.ms([&] { y.backward(upstream); });
    if (run < s.warmup) continue;
    forward.push_back(f);
    backward.push_back(b);
    if (t.bytes == 0) {
      // The fewest bytes the forward must move: its inputs read once, its output written once.
      for (const Tensor& x : in) t.bytes += static_cast<double>(x.nbytes());
      t.bytes += static_cast<double>(y.nbytes());
    }
  }
  t.forward_ms = bench::median(forward);
  t.backward_ms = bench::median(backward);
  t.flops = c.flops ? c.flops(d) : 0;
  return t;
}

int run(int argc, char** argv) {
  const Settings s = parse(argc, argv);
  std::printf("core op timing on %s, %s storage, median of %d runs after %d warm-up runs\n", s.device.str().c_str(),
              std::string(dtype_name(s.dtype)).c_str(), s.runs, s.warmup);
  std::printf("%-24s %-28s %12s %12s %10s %12s\n", "op", "dims", "forward ms", "backward ms", "fwd GB/s",
              "fwd TFLOP/s");
  int failures = 0;
  for (const OpCase& c : op_cases()) {
    if (!s.filter.empty() && c.name.find(s.filter) == std::string::npos) continue;
    for (const Dims& d : c.timing) {
      try {
        const Timing t = time_op(c, d, s);
        const double seconds = t.forward_ms / 1e3;
        char tflops[32] = "-";
        if (t.flops > 0) std::snprintf(tflops, sizeof tflops, "%.3f", t.flops / seconds / 1e12);
        std::printf("%-24s %-28s %12.4f %12.4f %10.1f %12s\n", c.name.c_str(), dims_str(d).c_str(), t.forward_ms,
                    t.backward_ms, t.bytes / seconds / 1e9, tflops);
      } catch (const std::exception& e) {
        ++failures;
        std::printf("%-24s %-28s did not run: %s\n", c.name.c_str(), dims_str(d).c_str(), e.what());
      }
      std::fflush(stdout);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace retort::op_testing

int main(int argc, char** argv) {
  return retort::op_testing::run(argc, argv);
}
