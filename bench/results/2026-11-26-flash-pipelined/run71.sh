#!/usr/bin/env bash
# Probe: the batch-32 decode products through cuBLASLt with cold weights (24 rotating copies) and warm ones (one copy,
# in L2), the first candidate of each: what prefetching the next product's weights into L2 could gain.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O2 -arch=sm_90a gpu/probe_gemm.cu -lcublasLt -o /tmp/probe_gemm
for c in 24 1; do echo "copies $c"; COPIES=$c /tmp/probe_gemm | grep "cand 0"; done
