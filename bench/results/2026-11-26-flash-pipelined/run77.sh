#!/usr/bin/env bash
# Nsight Compute on the pipelined flash backward (fa20 build) at 8 x 2048 x 32 x 8 x 128 and x 64: stall reasons and
# per-instruction samples.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r77; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r77' EXIT
tar xJf gpu/fa20.tar.xz -C gpu; b=$PWD/gpu/fa20; export LD_LIBRARY_PATH=$b/devlibs
for d in 128 64; do
timeout 200 ncu --kernel-name regex:wgmma_backward_pipelined --launch-skip 0 --launch-count 1 --section SourceCounters --section WarpStateStats \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --metrics smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_misc,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_sleeping,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_drain,smsp__pcsamp_warps_issue_stalled_imc_miss,smsp__pcsamp_warps_issue_stalled_tex_throttle,smsp__pcsamp_sample_count \
  -o $RES/bwd$d $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 1 --shapes 8x2048x32x8x$d > $RES/ncu$d.log 2>&1; echo "ncu $d rc $?"
ncu --import $RES/bwd$d.ncu-rep --page details > $RES/bwd$d-details.txt 2>&1
ncu --import $RES/bwd$d.ncu-rep --page raw --csv > $RES/bwd$d-raw.csv 2>&1
ncu --import $RES/bwd$d.ncu-rep --page source --csv --print-source sass > $RES/bwd$d-sass.csv 2> /dev/null; gzip $RES/bwd$d-sass.csv
grep -E "Duration|Issue Slots Busy|Tensor .*pipeline|No Eligible|Warp Cycles Per Issued" $RES/bwd$d-details.txt | head -8
done
