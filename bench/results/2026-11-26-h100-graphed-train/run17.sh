#!/usr/bin/env bash
# Call L (merged tree): the fused decode check (kernel and model tests, the generation benchmark at batch 1 and 32 with
# the torch peers in the same run).
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -e /work/main ]] || { mkdir -p /work && ln -s "$PWD" /work/main; }
RES=/tmp/r17; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r17' EXIT
tar xJf gpu/m.tar.xz -C gpu; b=$PWD/gpu/m; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
PEERS=1 BATCHES=1,32 COMPILE_TIMEOUT=120 timeout 560 bash gpu-checks/decode-fused.sh $b $RES/decode 2>&1 | tee $RES/decode.log | tail -40
