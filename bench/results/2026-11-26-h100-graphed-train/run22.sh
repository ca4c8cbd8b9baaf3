#!/usr/bin/env bash
# Call Q: where a batch-32 decode step's time goes: Nsight Compute kernel durations of the last step (fused path off
# at 32 rows, as the models take it), and the graph's step time for comparison.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r22; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r22' EXIT
tar xJf gpu/q.tar.xz -C gpu; b=$PWD/gpu/q; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv $b/bench/bench_generate \
  --batches 32 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu-unfused.csv 2> $RES/ncu-unfused.err; echo "ncu rc $?"
python3 bench/results/2026-11-26-h100-decode-fused/ncu_step.py $RES | head -30
