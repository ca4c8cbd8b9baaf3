#pragma once
// Host memory for CPU tensors. Blocks of 1 MiB and more are kept after release and handed out again for the same
// size: glibc maps blocks above its mmap threshold (at most 32 MiB) fresh from the kernel on every allocation and
// unmaps them on free, so a training step that allocates the same large activations and logits every step would
// otherwise pay a page fault (and the kernel's zeroing) per 4 KiB touched, step after step.
#include <cstddef>

namespace retort::host_allocator {

// 64-byte aligned (AVX-512 loads, aligned rows of views); throws retort::Error when the host is out of memory.
void* allocate(size_t nbytes);
void release(void* ptr, size_t nbytes);

// Returns the cached blocks to the system (e.g. before a phase with a different working set).
void release_cached();

}  // namespace retort::host_allocator
