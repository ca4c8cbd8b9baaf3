#pragma once
// Whether the ops use their fused kernels: a linear layer's bias (and GELU, and bias gradient) folded into the
// product's epilogue, and a residual add folded into the norm after it. On by default; RETORT_FUSED_KERNELS=0 in
// the environment turns them off, which runs the same math as separate kernels (the same binary then measures
// both, bench_train_throughput for one).
namespace retort::ops {

bool fused_kernels_enabled();
// Overrides the environment for this process (tests compare the two ways).
void set_fused_kernels_enabled(bool enabled);

// Sets the switch for a scope and restores the previous value afterwards.
class FusedKernelsScope {
 public:
  explicit FusedKernelsScope(bool enabled) : previous_(fused_kernels_enabled()) { set_fused_kernels_enabled(enabled); }
  ~FusedKernelsScope() { set_fused_kernels_enabled(previous_); }
  FusedKernelsScope(const FusedKernelsScope&) = delete;
  FusedKernelsScope& operator=(const FusedKernelsScope&) = delete;

 private:
  bool previous_;
};

// The fused kernels of a decode step with few rows (core/ops/decode_ops.h: norm + product + epilogue in one launch,
// the embedding in one launch). RETORT_DECODE_FUSED=0 (or off / false) in the environment turns them off (Off), which
// decodes with the ops the training forward uses, so one binary measures both; otherwise a GPU decode step in bf16
// takes them (Gpu). Everywhere (RETORT_DECODE_FUSED=everywhere) also takes them on the CPU and in any floating dtype:
// for tests, the CPU kernels being the reference, not a fast path.
enum class DecodeFusion { Off, Gpu, Everywhere };
DecodeFusion decode_fusion();
// Overrides the environment for this process.
void set_decode_fusion(DecodeFusion mode);

class DecodeFusionScope {
 public:
  explicit DecodeFusionScope(DecodeFusion mode) : previous_(decode_fusion()) { set_decode_fusion(mode); }
  ~DecodeFusionScope() { set_decode_fusion(previous_); }
  DecodeFusionScope(const DecodeFusionScope&) = delete;
  DecodeFusionScope& operator=(const DecodeFusionScope&) = delete;

 private:
  DecodeFusion previous_;
};

}  // namespace retort::ops
