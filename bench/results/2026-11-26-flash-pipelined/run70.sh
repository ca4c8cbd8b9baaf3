#!/usr/bin/env bash
# Probe: the fused decode step at 16 and 32 rows with the per-block norm skipped (wrong values, timing only), against
# the same step with it and the unfused step: the most that norming the rows once per step could gain.
# The bundle p1 carried a probe not kept in the tree: RETORT_PROBE_SKIP_NORM=1 made small_m_linear launch the tensor-core
# kernel with no norm (core/kernels/cuda/small_m_linear.cu, two lines), to time the fused step without its per-block norm.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r70; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r70' EXIT
tar xJf gpu/p1.tar.xz -C gpu; b=$PWD/gpu/p1; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for round in 1 2; do
for k in unfused fused32 fused32-skipnorm; do
  unset RETORT_DECODE_FUSED RETORT_DECODE_FUSED_MAX_ROWS RETORT_PROBE_SKIP_NORM
  case $k in
    unfused) export RETORT_DECODE_FUSED=0;;
    fused32) export RETORT_DECODE_FUSED_MAX_ROWS=32;;
    fused32-skipnorm) export RETORT_DECODE_FUSED_MAX_ROWS=32 RETORT_PROBE_SKIP_NORM=1;;
  esac
  $b/bench/bench_generate --label $k --batches 16,32 --prompt 128 --new 128 --repeats 3 --json $RES/gen.jsonl > $RES/$k-$round.log 2>&1; echo "$k rc $?"
done
done
python3 -c "
import json
for r in map(json.loads, open('$RES/gen.jsonl')): print(r['label'], r['batch'], round(r['ms_per_step'],4), r.get('graph_nodes'))"
