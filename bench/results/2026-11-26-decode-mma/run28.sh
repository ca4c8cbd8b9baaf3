#!/usr/bin/env bash
# Call C: the tensor-core decode products with the first weights loaded before the wait, the norm 8 threads a row
# from staged parameters; the same measurements as call B, plus Nsight Compute stall reasons of two products.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r28; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r28' EXIT
tar xJf gpu/c2.tar.xz -C gpu; b=$PWD/gpu/c2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
timeout 120 $b/tests/retort_core_tests --gtest_filter='SmallMLinear.*' > $RES/kernel-tests.log 2>&1; echo "kernel tests rc $?"; grep -E "FAILED|Failure" $RES/kernel-tests.log | head -5
timeout 120 $b/tests/retort_parallel_tests --gtest_filter='DecodeFused.*' > $RES/model-tests.log 2>&1; echo "model tests rc $?"; grep -E "FAILED|Failure" $RES/model-tests.log | head -5
shape=(--vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768 --prompt 128 --new 128 --repeats 3)
run() { local label=$1; shift; env "$@" timeout 90 $b/bench/bench_generate "${shape[@]}" --batches 8,16,32 --label $label --json $RES/bench.jsonl > $RES/$label.log 2>&1; echo "$label rc $?"; }
run fused
run unfused RETORT_DECODE_FUSED=0
run fused-wide RETORT_TRY_WIDE=1
run fused-mma1 RETORT_DECODE_MMA_MIN_ROWS=1
python3 - <<'PY'
import json
for l in open("/tmp/r28/bench.jsonl"):
  d=json.loads(l); print(d.get('label'), d.get('batch'), {k:v for k,v in d.items() if 'decode' in k or 'step' in k})
PY
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv $b/bench/bench_generate \
  --batches 32 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu-fused.csv 2> $RES/ncu-fused.err; echo "ncu rc $?"
python3 bench/results/2026-11-26-h100-decode-fused/ncu_step.py $RES | head -12
python3 - <<'PY'
import csv
rows=[x for x in csv.reader(open('/tmp/r28/ncu-fused.csv'))]
h=next(i for i,x in enumerate(rows) if x and x[0]=="ID"); head=rows[h]; rows=[x for x in rows[h+1:] if len(x)==len(head)]
k,v=head.index("Kernel Name"),head.index("Metric Value")
for x in rows[-63:][:8]: print(x[k][:40], x[v])
PY
for skip in 98 101; do
  timeout 120 ncu --kernel-name regex:mma_kernel --launch-skip $skip --launch-count 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    $b/bench/bench_generate --batches 32 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu-detail-$skip.txt 2>&1; echo "ncu detail $skip rc $?"
  grep -E "Duration|Memory Throughput|DRAM Throughput|Stall|Warp Cycles|Grid Size|Registers|Achieved Occupancy|L2 Hit|Shared Memory Configuration|Dynamic Shared" $RES/ncu-detail-$skip.txt | head -30
done
