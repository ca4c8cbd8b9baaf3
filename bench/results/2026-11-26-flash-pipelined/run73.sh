#!/usr/bin/env bash
# The pipelined flash backward (three stages on shared-memory barriers, dQ's product a step late, the warpgroups
# taking turns): the flash and attention GPU tests under both schedules, then the attention benchmark with SDPA for
# each schedule in one call.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r73; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r73' EXIT
tar xJf gpu/fa17.tar.xz -C gpu; b=$PWD/gpu/fa17; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in RETORT_FLASH_BACKWARD_SCHEDULE=pipelined RETORT_FLASH_BACKWARD_SCHEDULE=lockstep; do
  env $v timeout 120 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/core-${v//=/-}.log 2>&1
  echo "$v tests rc $?"; grep -E "PASSED|FAILED" $RES/core-${v//=/-}.log | head -5
done
for v in pipelined lockstep pipelined; do
  RETORT_FLASH_BACKWARD_SCHEDULE=$v PATHS=flash REPEATS=3 timeout 200 bench/run_attention_bench.sh $b $RES/attention-$v > $RES/attention-$v.log 2>&1; echo "bench $v rc $?"
  cat $RES/attention-$v/table.md 2>/dev/null | head -14
done
