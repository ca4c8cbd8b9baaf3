#pragma once
// Rotary position embedding frequencies (the Llama family): inv_freq_j = theta^(-2j / head_dim) for j < head_dim / 2,
// optionally rescaled as Llama 3.1 / 3.2 do ("llama3": long wavelengths slowed down by `factor`, short ones kept,
// a smooth blend between). The rotation itself is ops::rotary_embedding (Hugging Face's rotate-half layout).
#include <cstdint>
#include <string>
#include <vector>

namespace retort {

struct RopeConfig {
  std::string type = "default";  // default | llama3
  double theta = 10000.0;
  // llama3 scaling only:
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;

  // An InputError naming the rope type when it is neither default nor llama3, or a value that makes no sense.
  void validate() const;
};

// The head_dim / 2 inverse frequencies, computed as transformers does (float32 rounding of each step included),
// so positions rotate by the same angles.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

}  // namespace retort
