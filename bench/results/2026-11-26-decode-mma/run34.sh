#!/usr/bin/env bash
# Call I: after the tensor-core products' statistics became one helper (row_moments): the decode check's kernel,
# model and generation tests, and the benchmark at batches 8 and 16 (fused, unfused), no torch peers.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r34; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r34' EXIT
tar xJf gpu/i2.tar.xz -C gpu; b=$PWD/gpu/i2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
PEERS=0 BATCHES=8,16 timeout 200 bash gpu-checks/decode-fused.sh $b $RES/decode 2>&1 | tee $RES/decode.log | grep -E "PASS|FAIL|^\| |bench rc|Failure" | head -20
