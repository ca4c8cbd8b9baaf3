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

DecodeFusion decode_fusion_from_environment() {
  const char* value = std::getenv("RETORT_DECODE_FUSED");
  if (value == nullptr) return DecodeFusion::Gpu;
  const std::string_view v(value);
  if (v == "0" || v == "off" || v == "false") return DecodeFusion::Off;
  return v == "everywhere" ? DecodeFusion::Everywhere : DecodeFusion::Gpu;
}

std::atomic<DecodeFusion>& decode_fusion_state() {
  static std::atomic<DecodeFusion> mode{decode_fusion_from_environment()};
  return mode;
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

DecodeFusion decode_fusion() {
  return decode_fusion_state().load(std::memory_order_relaxed);
}

void set_decode_fusion(DecodeFusion mode) {
  decode_fusion_state().store(mode, std::memory_order_relaxed);
}

}  // namespace retort::ops
