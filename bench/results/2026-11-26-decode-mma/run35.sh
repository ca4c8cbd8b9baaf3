#!/usr/bin/env bash
# Call J: where the tensor-core decode product spends its instructions at 32 rows: Nsight Compute's per-instruction
# source counters (SASS, warp stall samples) of the q|k|v product of one batch-32 step (RETORT_DECODE_FUSED_MAX_ROWS=32).
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r35; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r35' EXIT
tar xJf gpu/j2.tar.xz -C gpu; b=$PWD/gpu/j2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt) RETORT_DECODE_FUSED_MAX_ROWS=32
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 150 ncu --kernel-name regex:mma_kernel --launch-skip 99 --launch-count 1 --section SourceCounters --section WarpStateStats \
  --section SpeedOfLight -o $RES/qkv $b/bench/bench_generate --batches 32 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu.log 2>&1; echo "ncu rc $?"
timeout 60 ncu --import $RES/qkv.ncu-rep --page source --csv --print-source sass > $RES/qkv-sass.csv 2> $RES/sass.err; echo "sass rc $? $(wc -l < $RES/qkv-sass.csv) lines"
head -c 600 $RES/sass.err
head -3 $RES/qkv-sass.csv | cut -c1-400
