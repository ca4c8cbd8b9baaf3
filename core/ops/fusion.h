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

}  // namespace retort::ops
