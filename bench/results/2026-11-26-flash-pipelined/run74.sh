#!/usr/bin/env bash
# The pipelined flash backward's turns: none (0), the second after the first (1), strict alternation (2); the tests
# under each, the retort side of the attention benchmark for each (twice, alternating), and a Nsight Compute profile of
# the backward at 8 x 2048 x 32 x 8 x 128 with the default turns.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r74; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r74' EXIT
tar xJf gpu/fa18.tar.xz -C gpu; b=$PWD/gpu/fa18; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for t in 0 1 2; do
  RETORT_FLASH_BACKWARD_TURNS=$t timeout 120 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/core-turns$t.log 2>&1
  echo "turns $t tests rc $?"; grep -E "PASSED|FAILED" $RES/core-turns$t.log | head -3
done
shapes=8x2048x32x8x128,4x4096x32x8x128,8x2048x32x8x64,4x4096x32x8x64,4x4096x12x12x64
for round in 1 2; do for t in 0 1 2 lockstep; do
  if [[ $t == lockstep ]]; then env="RETORT_FLASH_BACKWARD_SCHEDULE=lockstep"; else env="RETORT_FLASH_BACKWARD_TURNS=$t"; fi
  env $env timeout 100 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/turns-$t.jsonl > $RES/turns-$t-$round.log 2>&1
done; done
python3 - <<PY
import json, glob
for f in sorted(glob.glob('$RES/turns-*.jsonl')):
    for r in map(json.loads, open(f)):
        print(f.split('/')[-1], r.get('shape', r.get('B')), {k: round(v, 4) for k, v in r.items() if k.endswith('_ms')})
PY
timeout 200 ncu --kernel-name regex:wgmma_backward_pipelined --launch-skip 0 --launch-count 1 --section SourceCounters --section WarpStateStats \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats -o $RES/bwd $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 1 --shapes 8x2048x32x8x128 > $RES/ncu.log 2>&1; echo "ncu rc $?"
ncu --import $RES/bwd.ncu-rep --page details > $RES/bwd-details.txt 2>&1
ncu --import $RES/bwd.ncu-rep --page source --csv --print-source sass > $RES/bwd-sass.csv 2> /dev/null; gzip $RES/bwd-sass.csv
grep -E "Duration|Issue Slots Busy|Tensor|No Eligible|Stall|Warp Cycles Per Issued" $RES/bwd-details.txt | head -30
