#!/usr/bin/env bash
# Probe: every cuBLASLt heuristic candidate of the batch-32 decode products, timed in a CUDA graph, weights cold.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O2 -arch=sm_90a gpu/probe_gemm.cu -lcublasLt -o /tmp/probe_gemm && /tmp/probe_gemm | tee $OUT/probe.txt
