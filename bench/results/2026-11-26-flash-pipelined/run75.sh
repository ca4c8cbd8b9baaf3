#!/usr/bin/env bash
# The pipelined flash backward without turns and with its walk moved along incrementally: the flash and attention
# tests under both schedules; the retort side for both schedules twice, alternating; the full benchmark with SDPA.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r75; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r75' EXIT
tar xJf gpu/fa19.tar.xz -C gpu; b=$PWD/gpu/fa19; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in pipelined lockstep; do
  RETORT_FLASH_BACKWARD_SCHEDULE=$v timeout 120 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/core-$v.log 2>&1
  echo "$v tests rc $?"; grep -E "PASSED|FAILED" $RES/core-$v.log | head -3
done
shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do for v in pipelined lockstep; do
  RETORT_FLASH_BACKWARD_SCHEDULE=$v timeout 100 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/sched-$v.jsonl > $RES/sched-$v-$round.log 2>&1
done; done
python3 - <<PY
import json, collections
d = collections.defaultdict(list)
for v in ['pipelined', 'lockstep']:
    for r in map(json.loads, open('$RES/sched-%s.jsonl' % v)):
        d[(r['shape'], v)].append((round(r['forward_ms'], 4), round(r['forward_backward_ms'], 4)))
for (shape, v), xs in sorted(d.items()): print(shape, v, xs)
PY
PATHS=flash REPEATS=5 timeout 250 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "bench rc $?"
cat $RES/attention/table.md | tail -10
