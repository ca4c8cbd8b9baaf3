// SwiGLU, silu(gate) * up, as one pass over the elements each way (the Llama/Qwen MLP).
#include <algorithm>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

namespace {
constexpr int64_t kChunk = 16384;
}

void swiglu_forward(const Tensor& gate_in, const Tensor& up_in, Tensor& out_in) {
  Tensor gate = widen(gate_in), up = widen(up_in);
  OutputSlot slot(out_in);
  Tensor& out = slot.get();
  dispatch_real(out.dtype(), [&]<typename T>() {
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    const int64_t n = out.numel();
#pragma omp parallel for if (n > kChunk)
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
      const int64_t len = std::min(kChunk, n - c0);
      Eigen::Map<const Array> g(gate.data<T>() + c0, len), u(up.data<T>() + c0, len);
      Eigen::Map<Array>(out.data<T>() + c0, len) = g * u / (T(1) + (-g).exp());
    }
  });
  slot.finish();
}

void swiglu_backward(const Tensor& gate_in, const Tensor& up_in, const Tensor& dout_in, Tensor& dgate_in,
                     Tensor& dup_in) {
  Tensor gate = widen(gate_in), up = widen(up_in), dout = widen(dout_in);
  OutputSlot dgate_slot(dgate_in), dup_slot(dup_in);
  Tensor &dgate = dgate_slot.get(), &dup = dup_slot.get();
  dispatch_real(gate.dtype(), [&]<typename T>() {
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    const int64_t n = gate.numel();
#pragma omp parallel for if (n > kChunk)
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
      const int64_t len = std::min(kChunk, n - c0);
      Eigen::Map<const Array> g(gate.data<T>() + c0, len), u(up.data<T>() + c0, len), d(dout.data<T>() + c0, len);
      const Array s = T(1) / (T(1) + (-g).exp());
      // d silu(g) / dg = s (1 + g (1 - s)).
      Eigen::Map<Array>(dgate.data<T>() + c0, len) = d * u * s * (T(1) + g * (T(1) - s));
      Eigen::Map<Array>(dup.data<T>() + c0, len) = d * g * s;
    }
  });
  dgate_slot.finish();
  dup_slot.finish();
}

}  // namespace retort::kernels::cpu
