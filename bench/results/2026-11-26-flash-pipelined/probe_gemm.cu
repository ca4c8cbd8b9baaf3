// Times every cuBLASLt heuristic candidate of GPT-2 small's batch-32 decode products, in CUDA graphs, weights cold.
#include <cublasLt.h>
#include <cuda_bf16.h>

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
  struct Shape {
    int M, N, K;
    cublasLtEpilogue_t ep;
    const char* name;
  };
  std::vector<Shape> shapes = {{32, 2304, 768, CUBLASLT_EPILOGUE_BIAS, "qkv"},
                               {32, 768, 768, CUBLASLT_EPILOGUE_BIAS, "out"},
                               {32, 3072, 768, CUBLASLT_EPILOGUE_GELU_BIAS, "fc"},
                               {32, 768, 3072, CUBLASLT_EPILOGUE_BIAS, "down"},
                               {32, 50304, 768, CUBLASLT_EPILOGUE_DEFAULT, "head"},
                               {16, 2304, 768, CUBLASLT_EPILOGUE_BIAS, "qkv16"},
                               {32, 2048, 2048, CUBLASLT_EPILOGUE_DEFAULT, "llama-q"},
                               {32, 2048, 8192, CUBLASLT_EPILOGUE_DEFAULT, "llama-down"}};
  const int kCopies = getenv("COPIES") ? atoi(getenv("COPIES")) : 24;
  for (int mask_i = 0; mask_i < 1; ++mask_i)
    for (auto& sh : shapes) {
      size_t wbytes = (size_t)sh.N * sh.K * 2;
      std::vector<void*> w(kCopies);
      for (auto& p : w) {
        CK(cudaMalloc(&p, wbytes));
        CK(cudaMemset(p, 0, wbytes));
      }
      void *x, *d, *bias;
      CK(cudaMalloc(&x, (size_t)sh.M * sh.K * 2));
      CK(cudaMalloc(&d, (size_t)sh.M * sh.N * 2));
      CK(cudaMalloc(&bias, sh.N * 2));
      CK(cudaMemset(x, 0, (size_t)sh.M * sh.K * 2));
      CK(cudaMemset(bias, 0, sh.N * 2));
      cublasLtMatmulDesc_t op;
      CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4));
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4));
      uint32_t ep = sh.ep;
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, 4));
      if (sh.ep != CUBLASLT_EPILOGUE_DEFAULT)
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, 8));
      cublasLtMatrixLayout_t la, lb, ld;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, sh.K, sh.N, sh.K));
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, sh.K, sh.M, sh.K));
      CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, sh.N, sh.M, sh.N));
      cublasLtMatmulPreference_t pref;
      CK(cublasLtMatmulPreferenceCreate(&pref));
      uint64_t mw = ws_bytes;
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &mw, 8));
      if (mask_i == 1) {
        uint32_t m = CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_NONE;
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &m, 4));
      }
      cublasLtMatmulHeuristicResult_t res[16];
      int found = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 16, res, &found));
      for (int i = 0; i < found; ++i) {
        float alpha = 1, beta = 0;
        // graph of 48 launches over rotating weights
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
        int splitk = 0, red = 0, tile = 0, stages = 0;
        size_t sz;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, 4, &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, 4, &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, 4, &sz);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, 4, &sz);
        printf("%s mask%d cand %d: %.2f us/launch splitk %d red %d tile %d stages %d ws %zu\n", sh.name, mask_i, i,
               best * 1000 / 48, splitk, red, tile, stages, res[i].workspaceSize);
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
      }
      for (auto& p : w) cudaFree(p);
      cudaFree(x);
      cudaFree(d);
      cudaFree(bias);
    }
  return 0;
}
