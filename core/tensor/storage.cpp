#include "core/tensor/storage.h"

#include "core/tensor/device_runtime.h"

namespace retort {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = device_runtime::allocate(nbytes, device);
}

Storage::~Storage() {
  device_runtime::release(data_, nbytes_, device_);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  device_runtime::copy(dst, dst_device, src, src_device, nbytes);
}

}  // namespace retort
