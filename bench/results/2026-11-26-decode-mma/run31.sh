#!/usr/bin/env bash
# Call F: the cache attention with 4 keys per group in flight (kept in bf16 until used): its tests and the decode
# tests, the generation benchmark at batches 1, 8, 16, 32 (fused / unfused, no torch peers), Nsight Compute's
# kernel times of one batch-32 step on both paths and the attention's stall reasons.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r31; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r31' EXIT
tar xJf gpu/f2.tar.xz -C gpu; b=$PWD/gpu/f2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
PEERS=0 BATCHES=1,8,16,32 timeout 300 bash gpu-checks/decode-fused.sh $b $RES/decode 2>&1 | tee $RES/decode.log | grep -E "PASS|FAIL|^\| |bench rc|Failure" | head -20
for mode in fused unfused; do
  if [[ $mode == unfused ]]; then export RETORT_DECODE_FUSED=0; fi
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv $b/bench/bench_generate \
    --batches 32 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu-$mode.csv 2> $RES/ncu-$mode.err; echo "ncu $mode rc $?"
done
unset RETORT_DECODE_FUSED
python3 bench/results/2026-11-26-h100-decode-fused/ncu_step.py $RES | head -24
timeout 120 ncu --kernel-name regex:decode_kernel --launch-skip 24 --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,smsp__inst_executed.sum \
  $b/bench/bench_generate --batches 32 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu-attention.txt 2>&1; echo "ncu attention rc $?"
grep -E "Duration|DRAM Throughput|Grid Size|stalled|inst_executed|Achieved Occupancy|Registers" $RES/ncu-attention.txt | awk '$NF+0 > 0.1 || /Duration|Grid|inst|Occupancy|Registers/' | head -24
