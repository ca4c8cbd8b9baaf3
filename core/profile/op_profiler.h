#pragma once
// Opt-in per-op timing of a training step. While a profile is open, every kernel dispatch (core/kernels/kernels.cpp),
// every autograd backward node (core/autograd/engine.cpp) and the optimizer's update records a pair of timestamps:
// CUDA events on the device's compute stream for GPU work (the GPU time of the op, not the host time of its launch),
// the host clock for CPU work (CPU kernels run synchronously). Closing the profile waits for the device and sums the
// ranges by name. When no profile is open a range costs one relaxed atomic load.
//   profile::start_op_profile();  ... one step ...  const profile::OpProfile p = profile::stop_op_profile();
#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor/device.h"

namespace retort::profile {

namespace detail {
extern std::atomic<bool> active;
extern thread_local int open_ops;  // ops open on this thread: an op inside an op is part of the outer one
int begin_range(const char* name, bool is_node, Device device);
void end_range(int token);
}  // namespace detail

inline bool op_profile_active() {
  return detail::active.load(std::memory_order_relaxed);
}

// Times the enclosing scope as one call of `name`. Kernel dispatches and the optimizer are ops; only the outermost
// op of a thread is recorded (a CPU kernel converting its bf16 output through another dispatch is one op), so the
// ops never overlap. A backward node is a node: its time includes the ops it runs.
class Range {
 public:
  Range(const char* name, Device device, bool is_node = false) {
    if (!op_profile_active()) return;
    if (!is_node) {
      counted_ = true;
      if (detail::open_ops++ > 0) return;
    }
    token_ = detail::begin_range(name, is_node, device);
  }
  ~Range() {
    if (token_ >= 0) detail::end_range(token_);
    if (counted_) --detail::open_ops;
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  int token_ = -1;
  bool counted_ = false;
};

// The phase the current thread's ranges are filed under ("forward" outside any scope): the autograd engine opens
// "backward", Optimizer::step "optimizer", so a GEMM of the forward and one of the backward are separate rows.
class PhaseScope {
 public:
  explicit PhaseScope(const char* phase);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  const char* previous_;
};

struct OpTiming {
  std::string phase, name;
  int64_t calls = 0;
  double total_ms = 0;
};

struct OpProfile {
  double step_ms = 0;           // start_op_profile to stop_op_profile, on the device's clock
  std::vector<OpTiming> ops;    // disjoint: kernel dispatches and the optimizer, largest first
  std::vector<OpTiming> nodes;  // backward nodes, inclusive of their ops, largest first
  double ops_ms() const;        // the sum over ops
};

// Opens a profile on `device` (clearing any earlier one); throws if one is open.
void start_op_profile(Device device);
// Waits for the device and closes the profile.
OpProfile stop_op_profile();

// The ops as a table (name, phase, calls, total ms, share of the step), then the time in no op (host gaps,
// kernels outside the dispatch: communication, fused losses), then the backward nodes.
std::string format_op_profile(const OpProfile& profile);
nlohmann::json op_profile_json(const OpProfile& profile);

}  // namespace retort::profile
