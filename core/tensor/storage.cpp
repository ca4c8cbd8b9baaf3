#include "core/tensor/storage.h"

#include <atomic>

#include "core/tensor/device_runtime.h"

namespace retort {

namespace {
uint64_t next_version() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}
}  // namespace

Storage::Storage(size_t nbytes, Device device) : version_(next_version()), nbytes_(nbytes), device_(device) {
  data_ = device_runtime::allocate(nbytes, device);
}

void Storage::bump_version() {
  version_ = next_version();
}

Storage::~Storage() {
  device_runtime::release(data_, nbytes_, device_);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  device_runtime::copy(dst, dst_device, src, src_device, nbytes);
}

}  // namespace retort
