#pragma once
// A block of memory on one device. GPU blocks come from CUDA's stream-ordered pool (cudaMallocAsync)
// and go back to it on the device's compute stream when the last tensor using them is dropped.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/tensor/device.h"

namespace retort {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // A stamp of the contents, unique across all storages: a new storage gets a fresh one, and so does every
  // write through bump_version() (Tensor::copy_, an optimizer step). A cache derived from the contents (a
  // low-precision working copy of a weight, core/nn/working_copy.h) keeps the stamp it was made from and is
  // stale as soon as the two differ.
  uint64_t version() const { return version_; }
  void bump_version();

 private:
  uint64_t version_;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

// Copies nbytes between any two devices; GPU copies are ordered on the compute stream, and copies to the
// host wait for it.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace retort
