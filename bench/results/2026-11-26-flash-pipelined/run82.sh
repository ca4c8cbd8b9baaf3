#!/usr/bin/env bash
# The backward's shared set-up (BackwardStep::load_keys, key_operands, zero): the flash, attention and decoder-op tests
# under the default kernels and each schedule switch; the pipelined and lockstep backward at two shapes, alternating.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r82; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r82' EXIT
tar xJf gpu/fvC.tar.xz -C gpu; b=$PWD/gpu/fvC; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_BACKWARD_SCHEDULE=lockstep RETORT_FLASH_BACKWARD_KEYS=64 RETORT_FLASH_FORWARD_SCHEDULE=pipelined; do
  env $([[ $v == default ]] || echo $v) timeout 120 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure" $RES/tests-${v//=/-}.log | head -5
done
for round in 1 2; do for v in pipelined lockstep; do
  RETORT_FLASH_BACKWARD_SCHEDULE=$v timeout 60 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes 4x4096x32x8x128,4x4096x32x8x64 --json $RES/b-$v.jsonl > $RES/b-$v-$round.log 2>&1
done; done
python3 - <<PY
import json
for v in ['pipelined', 'lockstep']:
    for r in map(json.loads, open('$RES/b-%s.jsonl' % v)): print(v, r['shape'], round(r['forward_ms'], 4), round(r['forward_backward_ms'], 4))
PY
