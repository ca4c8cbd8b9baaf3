#include "core/ops/fusion.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

namespace retort::ops {
namespace {

bool from_environment() {
  const char* value = std::getenv("RETORT_FUSED_KERNELS");
  return value == nullptr || std::string_view(value) != "0";
}

std::atomic<bool>& switch_state() {
  static std::atomic<bool> enabled{from_environment()};
  return enabled;
}

}  // namespace

bool fused_kernels_enabled() {
  return switch_state().load(std::memory_order_relaxed);
}

void set_fused_kernels_enabled(bool enabled) {
  switch_state().store(enabled, std::memory_order_relaxed);
}

}  // namespace retort::ops
