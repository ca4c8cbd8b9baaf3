#!/usr/bin/env bash
# Final call A: the GPU suites of the core, losses, optim and distill tests (every *Cuda* / *Gpu* test), the flash
# tests under every kernel switch, and the attention benchmark against PyTorch SDPA on the final kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r80; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r80' EXIT
tar xJf gpu/fvA.tar.xz -C gpu; b=$PWD/gpu/fvA; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for t in core losses optim distill; do
  ( timeout 420 $b/tests/retort_${t}_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:SmallMLinear.*:EmbeddingSum.*' > $RES/suite-$t.log 2>&1; echo "$t rc $?" > $RES/rc-$t ) &
done
wait
for t in core losses optim distill; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
echo "suite done at $(( $(date +%s) - t0 )) s"
for v in RETORT_FLASH_FORWARD_SCHEDULE=lockstep RETORT_FLASH_FORWARD_SCHEDULE=pipelined RETORT_FLASH_BACKWARD_SCHEDULE=lockstep RETORT_FLASH_BACKWARD_KEYS=64 RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma; do
  env $v timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*' > $RES/switch-${v//=/-}.log 2>&1
  echo "flash tests $v rc $?: $(grep -c '^\[       OK' $RES/switch-${v//=/-}.log) ok"; grep -E "FAILED|Failure" $RES/switch-${v//=/-}.log | head -5
done
echo "switches done at $(( $(date +%s) - t0 )) s"
PATHS=flash REPEATS=5 timeout 250 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
cat $RES/attention/table.md | tail -10
echo "done at $(( $(date +%s) - t0 )) s"
