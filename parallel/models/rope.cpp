#include "parallel/models/rope.h"

#include <cmath>
#include <numbers>

#include "core/util/error.h"

namespace retort {

void RopeConfig::validate() const {
  RETORT_INPUT_CHECK(type == "default" || type == "llama3",
                     "rope type '{}' is not supported: retort implements 'default' and 'llama3' rotary embeddings",
                     type);
  RETORT_INPUT_CHECK(theta > 0, "rope_theta must be positive, got {}", theta);
  if (type == "llama3") {
    RETORT_INPUT_CHECK(factor > 0, "the llama3 rope scaling needs a positive factor, got {}", factor);
    RETORT_INPUT_CHECK(low_freq_factor > 0 && high_freq_factor > low_freq_factor,
                       "the llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got {} and {}",
                       low_freq_factor, high_freq_factor);
    RETORT_INPUT_CHECK(original_max_position > 0,
                       "the llama3 rope scaling needs a positive original_max_position_embeddings, got {}",
                       original_max_position);
  }
}

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim) {
  rope.validate();
  RETORT_INPUT_CHECK(head_dim > 0 && head_dim % 2 == 0, "rotary embeddings need an even head_dim, got {}", head_dim);
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  // float32 at every step, as transformers computes it: 1 / theta^(float(2j) / head_dim).
  for (int64_t j = 0; j < half; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    inv_freq[static_cast<size_t>(j)] = 1.0f / std::pow(static_cast<float>(rope.theta), exponent);
  }
  if (rope.type != "llama3") return inv_freq;
  const float factor = static_cast<float>(rope.factor), low = static_cast<float>(rope.low_freq_factor),
              high = static_cast<float>(rope.high_freq_factor);
  const float original = static_cast<float>(rope.original_max_position);
  const float low_freq_wavelen = original / low, high_freq_wavelen = original / high;
  for (float& f : inv_freq) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies are kept
    if (wavelen > low_freq_wavelen) {           // low frequencies slow down by the factor
      f = f / factor;
      continue;
    }
    const float smooth = (original / wavelen - low) / (high - low);
    f = (1.0f - smooth) * f / factor + smooth * f;
  }
  return inv_freq;
}

}  // namespace retort
