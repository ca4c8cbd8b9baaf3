#!/usr/bin/env bash
# The pipelined flash forward with its turns on two alternating named barriers (call 78 hung at 4 x 4096 x 32 x 8 x 64:
# the first warpgroup could arrive twice on one barrier before the second waited): tests three times under each forward
# schedule, every shape many times under a timeout, then both schedules twice, alternating, and the SDPA table.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r79; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r79' EXIT
tar xJf gpu/fa22.tar.xz -C gpu; b=$PWD/gpu/fa22; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in pipelined lockstep; do
  RETORT_FLASH_FORWARD_SCHEDULE=$v timeout 200 $b/tests/retort_core_tests --gtest_repeat=3 --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/core-$v.log 2>&1
  echo "$v tests rc $?"; grep -cE "PASSED" $RES/core-$v.log; grep -E "FAILED" $RES/core-$v.log | head -3
done
shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
timeout 150 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 40 --shapes $shapes --json $RES/soak.jsonl > $RES/soak.log 2>&1; echo "soak rc $? rows $(wc -l < $RES/soak.jsonl)"
for round in 1 2; do for v in pipelined lockstep; do
  RETORT_FLASH_FORWARD_SCHEDULE=$v timeout 100 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/fwd-$v.jsonl > $RES/fwd-$v-$round.log 2>&1; echo "$v $round rc $?"
done; done
python3 - <<PY
import json, collections
d = collections.defaultdict(list)
for v in ['pipelined', 'lockstep']:
    for r in map(json.loads, open('$RES/fwd-%s.jsonl' % v)):
        d[(r['shape'], v)].append((round(r['forward_ms'], 4), round(r['forward_backward_ms'], 4)))
for (shape, v), xs in sorted(d.items()): print(shape, v, xs)
PY
PATHS=flash REPEATS=5 timeout 250 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "bench rc $?"
cat $RES/attention/table.md | tail -10
