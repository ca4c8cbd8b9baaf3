#!/usr/bin/env bash
# Call R: the final tree (dQ's atomics by head size). Flash attention tests under every switch; the attention
# benchmark against PyTorch SDPA.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r53; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r53' EXIT
tar xJf gpu/fa14.tar.xz -C gpu; b=$PWD/gpu/fa14; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_BACKWARD_KEYS=64 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma RETORT_FLASH_ROWS=16 RETORT_FLASH_KEYS=128; do
  env $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*:Ops/OpCudaVsCpu.*/causal*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is" $RES/tests-${v//=/-}.log | head -8
done
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $? at $(( $(date +%s) - t0 )) s"
cat $RES/attention/table.md
