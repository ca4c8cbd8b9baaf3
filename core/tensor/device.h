#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace retort {

enum class DeviceKind : uint8_t { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static Device cpu() { return {DeviceKind::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceKind::CUDA, index}; }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;
  static Device parse(std::string_view text);  // "cpu", "cuda", "cuda:1"
};

// True when this build has the CUDA backend and at least one GPU is visible.
bool cuda_available();
int cuda_device_count();

}  // namespace retort
