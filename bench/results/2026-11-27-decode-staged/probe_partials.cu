// Times GPT-2 small's batch-32 MLP down-projection (M 32, N 768, K 3072, bf16) as cuBLASLt picks it (split-K with its
// reduction kernel, bias epilogue, bf16 out) against the same product as S strided batches over slices of K with
// float32 partial outputs [S, 32, 768] (what a norm kernel after it would add up), in CUDA graphs of 48 launches over
// 24 rotating weight copies (cold, as in a decode step). Every heuristic candidate up to 4.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define CK(x)                                                  \
  do {                                                         \
    auto e = (x);                                              \
    if ((int)e) {                                              \
      printf("err %d at %s:%d\n", (int)e, __FILE__, __LINE__); \
      exit(1);                                                 \
    }                                                          \
  } while (0)
int main() {
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  size_t ws_bytes = 32 << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  const int kCopies = 24;
  struct Shape {
    int M, N, K;
    const char* name;
  };
  for (Shape sh : {Shape{32, 768, 3072, "down"}, Shape{32, 768, 768, "out"}, Shape{32, 2048, 8192, "llama-down"}}) {
    const size_t wbytes = (size_t)sh.N * sh.K * 2;
    std::vector<void*> w(kCopies);
    for (auto& p : w) {
      CK(cudaMalloc(&p, wbytes));
      CK(cudaMemset(p, 0, wbytes));
    }
    void *x, *d, *bias;
    CK(cudaMalloc(&x, (size_t)sh.M * sh.K * 2));
    CK(cudaMalloc(&d, (size_t)8 * sh.M * sh.N * 4));
    CK(cudaMalloc(&bias, sh.N * 2));
    CK(cudaMemset(x, 0, (size_t)sh.M * sh.K * 2));
    CK(cudaMemset(bias, 0, sh.N * 2));
    for (int S : {0, 1, 2, 3, 4, 6, 8}) {  // 0: the plain product with bias, bf16 out
      if (S > 0 && sh.K % S) continue;
      const int Ks = S ? sh.K / S : sh.K;
      cublasLtMatmulDesc_t op;
      CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4));
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4));
      if (S == 0) {
        uint32_t ep = CUBLASLT_EPILOGUE_BIAS;
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, 4));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, 8));
      }
      cublasLtMatrixLayout_t la, lb, ld;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, Ks, sh.N, sh.K));
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, Ks, sh.M, sh.K));
      CK(cublasLtMatrixLayoutCreate(&ld, S ? CUDA_R_32F : CUDA_R_16BF, sh.N, sh.M, sh.N));
      if (S > 0) {
        int32_t count = S;
        int64_t sa = Ks, sb = Ks, sd = (int64_t)sh.N * sh.M;
        for (auto l : {la, lb, ld})
          CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, 4));
        CK(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, 8));
        CK(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, 8));
        CK(cublasLtMatrixLayoutSetAttribute(ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd, 8));
      }
      cublasLtMatmulPreference_t pref;
      CK(cublasLtMatmulPreferenceCreate(&pref));
      uint64_t mw = ws_bytes;
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &mw, 8));
      cublasLtMatmulHeuristicResult_t res[4];
      int found = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 4, res, &found));
      for (int i = 0; i < found; ++i) {
        float alpha = 1, beta = 0;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int r = 0; r < 48; ++r)
          CK(cublasLtMatmul(h, op, &alpha, w[r % kCopies], la, x, lb, &beta, d, ld, d, ld, &res[i].algo, ws, ws_bytes,
                            s));
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        float best = 1e9;
        for (int rep = 0; rep < 5; ++rep) {
          cudaEventRecord(e0, s);
          CK(cudaGraphLaunch(ge, s));
          cudaEventRecord(e1, s);
          cudaEventSynchronize(e1);
          float ms;
          cudaEventElapsedTime(&ms, e0, e1);
          best = std::min(best, ms);
        }
        int splitk = 0;
        size_t sz;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, 4, &sz);
        printf("%s S %d cand %d: %.2f us/launch splitk %d ws %zu\n", sh.name, S, i, best * 1000 / 48, splitk,
               res[i].workspaceSize);
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
      }
    }
    for (auto& p : w) cudaFree(p);
    cudaFree(x);
    cudaFree(d);
    cudaFree(bias);
  }
  return 0;
}
