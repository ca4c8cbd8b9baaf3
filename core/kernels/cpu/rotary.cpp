// Rotary position embedding (Hugging Face's rotate-half layout) and its inverse, the gradient.
#include <cmath>

#include "core/kernels/backends.h"
#include "core/kernels/cpu/cpu_common.h"

namespace retort::kernels::cpu {

void rotary_embedding(const Tensor& x_in, const Tensor& positions, const Tensor& inv_freq, int64_t head_dim,
                      bool inverse, Tensor& out_in) {
  Tensor x = widen(x_in);
  OutputSlot slot(out_in);
  Tensor& out = slot.get();
  dispatch_real(x.dtype(), [&]<typename T>() {
    const int64_t rows = x.size(0) * x.size(1), width = x.size(2), half = head_dim / 2;
    const int32_t* pos = positions.data<int32_t>();
    const float* freq = inv_freq.data<float>();
    const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for if (rows * width > 16384)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x.data<T>() + r * width;
      T* yr = out.data<T>() + r * width;
      for (int64_t j = 0; j < half; ++j) {
        // The angle in float32, as the reference computes it; cos and sin then in T.
        const float angle = static_cast<float>(pos[r]) * freq[j];
        const T c = std::cos(static_cast<T>(angle)), s = sign * std::sin(static_cast<T>(angle));
        for (int64_t h0 = 0; h0 < width; h0 += head_dim) {
          const T a = xr[h0 + j], b = xr[h0 + j + half];
          yr[h0 + j] = a * c - b * s;
          yr[h0 + j + half] = b * c + a * s;
        }
      }
    }
  });
  slot.finish();
}

}  // namespace retort::kernels::cpu
