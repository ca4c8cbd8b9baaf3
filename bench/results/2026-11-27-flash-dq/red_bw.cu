// How fast can the L2 take float32 reductions? Each CTA adds `per_cta` chunks of 16 KB into a 512 MB region, as
// (a) 4-float red from every thread (a warp covers 512 contiguous bytes), (b) one bulk reduction of 16 KB from shared
// memory, (c) plain 16-byte stores, for comparison.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
__global__ void red_v4(float* buf, int64_t n_chunks, int per_cta) {
  for (int i = 0; i < per_cta; ++i) {
    int64_t chunk = (static_cast<int64_t>(blockIdx.x) * 7919 + i * 104729) % n_chunks;
    float* p = buf + chunk * 4096 + threadIdx.x * 4;
    for (int k = 0; k < 4096 / (blockDim.x * 4); ++k)
      asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p + k * blockDim.x * 4), "f"(1.f), "f"(1.f),
                   "f"(1.f), "f"(1.f)
                   : "memory");
  }
}
__global__ void red_v2(float* buf, int64_t n_chunks, int per_cta) {
  for (int i = 0; i < per_cta; ++i) {
    int64_t chunk = (static_cast<int64_t>(blockIdx.x) * 7919 + i * 104729) % n_chunks;
    float* p = buf + chunk * 4096 + threadIdx.x * 2;
    for (int k = 0; k < 4096 / (blockDim.x * 2); ++k)
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p + k * blockDim.x * 2), "f"(1.f), "f"(1.f)
                   : "memory");
  }
}
__global__ void st_v4(float* buf, int64_t n_chunks, int per_cta) {
  for (int i = 0; i < per_cta; ++i) {
    int64_t chunk = (static_cast<int64_t>(blockIdx.x) * 7919 + i * 104729) % n_chunks;
    float4* p = reinterpret_cast<float4*>(buf + chunk * 4096) + threadIdx.x;
    for (int k = 0; k < 4096 / (blockDim.x * 4); ++k) p[k * blockDim.x] = make_float4(1.f, 1.f, 1.f, 1.f);
  }
}
__global__ void bulk(float* buf, int64_t n_chunks, int per_cta) {
  __shared__ __align__(128) float s[4096];
  for (int k = threadIdx.x; k < 4096; k += blockDim.x) s[k] = 1.f;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t src = static_cast<uint32_t>(__cvta_generic_to_shared(s));
    for (int i = 0; i < per_cta; ++i) {
      int64_t chunk = (static_cast<int64_t>(blockIdx.x) * 7919 + i * 104729) % n_chunks;
      asm volatile(
          "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], 16384;" ::"l"(buf + chunk * 4096),
          "r"(src)
          : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 4;" ::: "memory");
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}
int main() {
  for (int64_t mb : {8, 24, 48, 96, 512}) {
    const int64_t n_chunks = mb * 1024 * 1024 / 16384;
    printf("region %ld MB\n", (long)mb);
    float* buf;
    cudaMalloc(&buf, n_chunks * 16384);
    cudaMemset(buf, 0, n_chunks * 16384);
    int sms;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int ctas_per_sm : {2}) {
      const int grid = sms * ctas_per_sm, per_cta = 2048 / ctas_per_sm;
      const double bytes = double(grid) * per_cta * 16384;
      auto time = [&](const char* name, auto kernel) {
        for (int rep = 0; rep < 3; ++rep) {
          cudaEventRecord(a);
          kernel<<<grid, 256>>>(buf, n_chunks, per_cta);
          cudaEventRecord(b);
          cudaEventSynchronize(b);
          float ms;
          cudaEventElapsedTime(&ms, a, b);
          if (rep == 2) printf("%-7s ctas/sm %d: %.3f ms, %.2f TB/s\n", name, ctas_per_sm, ms, bytes / ms / 1e9);
        }
      };
      time("red_v4", red_v4);
      time("red_v2", red_v2);
      time("st_v4", st_v4);
      time("bulk", bulk);
    }
    cudaFree(buf);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
