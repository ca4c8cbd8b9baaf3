// eigh on the GPU through cuSOLVER: syevd for one matrix, syevjBatched for a batch of small ones. cuSOLVER is
// column-major: the row-major lower triangle we promise to read is its upper triangle, and its eigenvector
// columns come out as rows of our row-major buffer, in ascending order; one kernel transposes and reverses
// them into descending columns and flags any non-finite value, so a failure costs one small host read.
#include <cusolverDn.h>

#include <atomic>
#include <map>
#include <mutex>

#include "core/cuda/cuda_context.h"
#include "optim/rekls/eigh.h"

namespace retort::optim {

namespace {

[[noreturn]] void throw_cusolver_error(cusolverStatus_t status, const char* call, const char* file, int line) {
  throw Error(
      fmt::format("cuSOLVER call {} failed with status {} at {}:{}", call, static_cast<int>(status), file, line));
}

#define RETORT_CUSOLVER_CHECK(call)                                    \
  do {                                                                 \
    cusolverStatus_t retort_status_ = (call);                          \
    if (retort_status_ != CUSOLVER_STATUS_SUCCESS) [[unlikely]]        \
      throw_cusolver_error(retort_status_, #call, __FILE__, __LINE__); \
  } while (0)

// One cuSOLVER handle per device, bound to the device's compute stream at every use.
cusolverDnHandle_t cusolver_handle() {
  static std::mutex mutex;
  static std::map<int, cusolverDnHandle_t> handles;
  const int device = cuda::current_device();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(device);
  if (it == handles.end()) {
    cusolverDnHandle_t handle = nullptr;
    RETORT_CUSOLVER_CHECK(cusolverDnCreate(&handle));
    it = handles.emplace(device, handle).first;
  }
  RETORT_CUSOLVER_CHECK(cusolverDnSetStream(it->second, cuda::current_stream()));
  return it->second;
}

// q[b][i][j] = vectors[b][(n-1-j) column][i], lam[b][j] = values[b][n-1-j]; flag[0] |= 1 on a non-finite value.
template <typename T>
__global__ void reorder_kernel(const T* __restrict__ vectors, const T* __restrict__ values, float* __restrict__ q,
                               float* __restrict__ lam, int64_t batch, int64_t n, int* flag) {
  const int64_t total = batch * n * n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = idx / (n * n), rem = idx % (n * n), i = rem / n, j = rem % n;
    const float v = static_cast<float>(vectors[b * n * n + (n - 1 - j) * n + i]);
    q[idx] = v;
    bool bad = !isfinite(v);
    if (i == 0) {
      const float l = static_cast<float>(values[b * n + (n - 1 - j)]);
      lam[b * n + j] = l;
      bad = bad || !isfinite(l);
    }
    if (bad) atomicOr(flag, 1);
  }
}

__global__ void widen_kernel(const float* __restrict__ in, double* __restrict__ out, int64_t count) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[idx] = static_cast<double>(in[idx]);
}

int blocks_for(int64_t count) {
  return static_cast<int>(std::min<int64_t>((count + 255) / 256, 4096));
}

template <typename T>
void reorder(const T* vectors, const T* values, float* q, float* lam, int64_t batch, int64_t n, int* flag) {
  reorder_kernel<T>
      <<<blocks_for(batch * n * n), 256, 0, cuda::current_stream()>>>(vectors, values, q, lam, batch, n, flag);
  RETORT_CUDA_CHECK_LAUNCH();
}

// Host copy of `count` ints (the solver's info words and the non-finite flag); waits for the stream.
std::vector<int> read_ints(const int* device, int64_t count) {
  std::vector<int> host(static_cast<size_t>(count));
  RETORT_CUDA_CHECK(
      cudaMemcpyAsync(host.data(), device, sizeof(int) * count, cudaMemcpyDeviceToHost, cuda::current_stream()));
  RETORT_CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream()));
  return host;
}

// syevd on one n x n matrix in place (float or double); ints[0] receives info.
template <typename T>
void syevd(cusolverDnHandle_t handle, T* matrix, T* values, int n, int* info) {
  int lwork = 0;
  if constexpr (std::is_same_v<T, float>) {
    RETORT_CUSOLVER_CHECK(cusolverDnSsyevd_bufferSize(handle, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n,
                                                      matrix, n, values, &lwork));
    cuda::ScratchBuffer work(sizeof(T) * std::max(lwork, 1));
    RETORT_CUSOLVER_CHECK(cusolverDnSsyevd(handle, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n, matrix, n,
                                           values, static_cast<T*>(work.data()), lwork, info));
  } else {
    RETORT_CUSOLVER_CHECK(cusolverDnDsyevd_bufferSize(handle, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n,
                                                      matrix, n, values, &lwork));
    cuda::ScratchBuffer work(sizeof(T) * std::max(lwork, 1));
    RETORT_CUSOLVER_CHECK(cusolverDnDsyevd(handle, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n, matrix, n,
                                           values, static_cast<T*>(work.data()), lwork, info));
  }
}

// The float64 retry of matrix `a` (device f32, n x n) into q and lam; throws when it fails too.
void eigh_float64(const float* a, int64_t n, float* q, float* lam, cusolverDnHandle_t handle) {
  cuda::ScratchBuffer matrix(sizeof(double) * n * n), values(sizeof(double) * n), ints(sizeof(int) * 2);
  widen_kernel<<<blocks_for(n * n), 256, 0, cuda::current_stream()>>>(a, static_cast<double*>(matrix.data()), n * n);
  RETORT_CUDA_CHECK_LAUNCH();
  int* flags = static_cast<int*>(ints.data());
  RETORT_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(int) * 2, cuda::current_stream()));
  syevd<double>(handle, static_cast<double*>(matrix.data()), static_cast<double*>(values.data()), static_cast<int>(n),
                flags);
  reorder<double>(static_cast<double*>(matrix.data()), static_cast<double*>(values.data()), q, lam, 1, n, flags + 1);
  const auto host = read_ints(flags, 2);
  RETORT_CHECK(host[0] == 0 && host[1] == 0,
               "eigh: cuSOLVER's float64 retry failed on a {}x{} matrix too (info {}, non-finite {}): is the input "
               "finite?",
               n, n, host[0], host[1]);
}

}  // namespace

void eigh_cuda(const Tensor& a, Tensor& eigenvalues, Tensor& eigenvectors, std::atomic<int64_t>& retries) {
  cuda::DeviceGuard guard(a.device());
  const int64_t n = a.size(0);
  cusolverDnHandle_t handle = cusolver_handle();
  cudaStream_t stream = cuda::current_stream();
  cuda::ScratchBuffer matrix(sizeof(float) * n * n), values(sizeof(float) * n), ints(sizeof(int) * 2);
  RETORT_CUDA_CHECK(
      cudaMemcpyAsync(matrix.data(), a.data<float>(), sizeof(float) * n * n, cudaMemcpyDeviceToDevice, stream));
  int* flags = static_cast<int*>(ints.data());
  RETORT_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(int) * 2, stream));
  syevd<float>(handle, static_cast<float*>(matrix.data()), static_cast<float*>(values.data()), static_cast<int>(n),
               flags);
  reorder<float>(static_cast<float*>(matrix.data()), static_cast<float*>(values.data()), eigenvectors.data<float>(),
                 eigenvalues.data<float>(), 1, n, flags + 1);
  const auto host = read_ints(flags, 2);
  if (host[0] == 0 && host[1] == 0) return;
  ++retries;
  eigh_float64(a.data<float>(), n, eigenvectors.data<float>(), eigenvalues.data<float>(), handle);
}

void eigh_batched_cuda(const Tensor& a, Tensor& eigenvalues, Tensor& eigenvectors, std::atomic<int64_t>& retries) {
  cuda::DeviceGuard guard(a.device());
  const int64_t batch = a.size(0), n = a.size(1);
  if (n > 32) {
    // syevjBatched is limited to n <= 32: larger matrices go one by one through syevd.
    for (int64_t i = 0; i < batch; ++i) {
      Tensor ai = a.view({batch * n, n}).rows(i * n, n);
      Tensor qi = eigenvectors.view({batch * n, n}).rows(i * n, n);
      Tensor li = eigenvalues.rows(i, 1).view({n});
      eigh_cuda(ai, li, qi, retries);
    }
    return;
  }
  cusolverDnHandle_t handle = cusolver_handle();
  cudaStream_t stream = cuda::current_stream();
  cuda::ScratchBuffer matrix(sizeof(float) * batch * n * n), values(sizeof(float) * batch * n),
      ints(sizeof(int) * (batch + 1));
  RETORT_CUDA_CHECK(
      cudaMemcpyAsync(matrix.data(), a.data<float>(), sizeof(float) * batch * n * n, cudaMemcpyDeviceToDevice, stream));
  int* flags = static_cast<int*>(ints.data());
  RETORT_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(int) * (batch + 1), stream));
  syevjInfo_t params = nullptr;
  RETORT_CUSOLVER_CHECK(cusolverDnCreateSyevjInfo(&params));
  struct ParamsGuard {
    syevjInfo_t p;
    ~ParamsGuard() { cusolverDnDestroySyevjInfo(p); }
  } params_guard{params};
  RETORT_CUSOLVER_CHECK(cusolverDnXsyevjSetSortEig(params, 1));  // ascending; reorder reverses
  int lwork = 0;
  float* m = static_cast<float*>(matrix.data());
  float* w = static_cast<float*>(values.data());
  const int ni = static_cast<int>(n), bi = static_cast<int>(batch);
  RETORT_CUSOLVER_CHECK(cusolverDnSsyevjBatched_bufferSize(handle, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, ni,
                                                           m, ni, w, &lwork, params, bi));
  cuda::ScratchBuffer work(sizeof(float) * std::max(lwork, 1));
  RETORT_CUSOLVER_CHECK(cusolverDnSsyevjBatched(handle, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, ni, m, ni, w,
                                                static_cast<float*>(work.data()), lwork, flags, params, bi));
  reorder<float>(m, w, eigenvectors.data<float>(), eigenvalues.data<float>(), batch, n, flags + batch);
  const auto host = read_ints(flags, batch + 1);
  bool any_bad = host[batch] != 0;
  for (int64_t i = 0; i < batch && !any_bad; ++i) any_bad = host[i] != 0;
  if (!any_bad) return;
  // Some matrix failed (info != 0 or a non-finite value somewhere): solve every flagged matrix again in
  // float64; when the flag cannot say which, all of them.
  for (int64_t i = 0; i < batch; ++i) {
    if (host[batch] == 0 && host[i] == 0) continue;
    ++retries;
    eigh_float64(a.data<float>() + i * n * n, n, eigenvectors.data<float>() + i * n * n,
                 eigenvalues.data<float>() + i * n, handle);
  }
}

}  // namespace retort::optim
