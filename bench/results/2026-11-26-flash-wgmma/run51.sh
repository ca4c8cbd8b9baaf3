#!/usr/bin/env bash
# Call P: Nsight Compute on the final wgmma backward at 8 x 2048 x 32 x 8 x 128 (as call F):
# speed of light, warp states, per-instruction source counters.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r51; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r51' EXIT
tar xJf gpu/fa11.tar.xz -C gpu; b=$PWD/gpu/fa11; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for k in backward; do
  timeout 200 ncu --kernel-name regex:wgmma_${k}_kernel --launch-skip 0 --launch-count 1 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section MemoryWorkloadAnalysis -o $RES/$k $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 1 --shapes 8x2048x32x8x128 > $RES/ncu-$k.log 2>&1; echo "ncu $k rc $?"
  ncu --import $RES/$k.ncu-rep --page details > $RES/$k-details.txt 2>&1
  ncu --import $RES/$k.ncu-rep --page source --csv --print-source sass > $RES/$k-sass.csv 2> /dev/null; gzip $RES/$k-sass.csv
done
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Stall|L1/TEX Hit|L2 Hit|DRAM Through" $RES/backward-details.txt | head -40
