#!/usr/bin/env bash
# How long the host's cudaGraphLaunch of a decode step takes without a tracer, and what the GPU does meanwhile: a
# probe build (run5-probe.patch on a9e3605; not kept) with RETORT_PROBE_LAUNCH=1 times each replay's launch call and
# its wait on the host and the events recorded before and after it on the stream. GPT-2 small, batches 1 and 32.
set -uo pipefail
cd "$(dirname "$0")/../../.."
RES=/tmp/r5; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r5' EXIT
tar xJf gpu/q4.tar.xz -C gpu; b=$PWD/gpu/q4; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
for batch in 1 32; do
  for v in kernels nodes; do
    env $([ $v = nodes ] && echo RETORT_DECODE_GRAPH_COPIES=nodes) timeout 60 $b/bench_generate "${gen[@]}" --batches $batch --label $v > $RES/plain-$v-$batch.log 2>&1
    env $([ $v = nodes ] && echo RETORT_DECODE_GRAPH_COPIES=nodes) RETORT_PROBE_LAUNCH=1 timeout 60 $b/bench_generate "${gen[@]}" --batches $batch --label probe-$v > $RES/probe-$v-$batch.log 2>&1
    echo "batch $batch $v: $(grep -E '^ +[0-9]+ ' $RES/plain-$v-$batch.log | awk '{print $4}') ms a step plain; $(grep -E '^ +[0-9]+ ' $RES/probe-$v-$batch.log | awk '{print $4}') probed; $(grep probe: $RES/probe-$v-$batch.log | tail -1)"
  done
done
