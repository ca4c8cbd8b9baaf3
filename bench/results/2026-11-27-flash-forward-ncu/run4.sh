#!/usr/bin/env bash
# Where the forward at head size 128, T = 4096 spends its time, against cuDNN's (SDPA): Nsight Compute's speed of
# light, warp states, occupancy and launch statistics of both kernels at 4 x 4096 x 32 x 8 x 128, and retort's
# per-instruction source counters (SASS, warp stall samples). The build is 0a5cfb1's (the forward is the tree's).
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r4; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r4' EXIT
tar xJf gpu/q1.tar.xz -C gpu; b=$PWD/gpu/q1; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
NCU=/usr/local/cuda-13.0/bin/ncu
SEC=(--section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section InstructionStats)
timeout 200 $NCU --kernel-name regex:wgmma_forward --launch-count 1 "${SEC[@]}" --section SourceCounters -o $RES/retort $b/bench_attention --device cuda --dtype bf16 --shapes 4x4096x32x8x128 --repeats 1 --paths flash > $RES/ncu-retort.log 2>&1; echo "ncu retort rc $?"
timeout 60 $NCU --import $RES/retort.ncu-rep --page details > $RES/retort-details.txt 2>&1
timeout 60 $NCU --import $RES/retort.ncu-rep --page source --csv --print-source sass > $RES/retort-sass.csv 2> $RES/sass.err; echo "sass rc $? $(wc -l < $RES/retort-sass.csv) lines"
gzip $RES/retort-sass.csv
echo "at $(( $(date +%s) - t0 )) s"
timeout 250 $NCU --target-processes all --kernel-name regex:"fprop|fmha|flash|attn" --launch-count 1 "${SEC[@]}" -o $RES/sdpa python3 bench/attention_bench_torch.py --device cuda --dtype bf16 --shapes 4x4096x32x8x128 --repeats 1 > $RES/ncu-sdpa.log 2>&1; echo "ncu sdpa rc $?"
timeout 60 $NCU --import $RES/sdpa.ncu-rep --page details > $RES/sdpa-details.txt 2>&1
for f in retort sdpa; do
  echo "== $f"; grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Block Size|Grid Size|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc Active|Dynamic Shared" $RES/$f-details.txt | head -20
done
echo "done at $(( $(date +%s) - t0 )) s"
