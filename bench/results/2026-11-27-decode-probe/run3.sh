#!/usr/bin/env bash
# A kernel timeline of GPT-2 small's decode steps (CUDA graphs; batch 32 and 1): timeline_injection.cpp loaded
# through CUDA_INJECTION64_PATH records every kernel and copy of the replays on the GPU clock and the host's graph
# launches and waits. The same benchmark without the tracer first, for its overhead. Built from 0709553.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r3; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r3' EXIT
tar xJf gpu/q2.tar.xz -C gpu; b=$PWD/gpu/q2; export LD_LIBRARY_PATH=$b/devlibs
tar xJf gpu/tl.tar.xz -C gpu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
for batch in 32 1; do
  timeout 60 $b/bench_generate "${gen[@]}" --batches $batch --label plain --json $RES/gen.jsonl > $RES/gen-plain-$batch.log 2>&1 || echo "plain $batch rc $?"
  LD_LIBRARY_PATH=$b/devlibs:$PWD/gpu/tl CUDA_INJECTION64_PATH=$PWD/gpu/tl/libtimeline.so TIMELINE_CSV=$RES/timeline-$batch.csv \
    timeout 120 $b/bench_generate "${gen[@]}" --batches $batch --label traced --json $RES/gen.jsonl > $RES/gen-traced-$batch.log 2>&1 || echo "traced $batch rc $?"
  ls -la $RES/timeline-$batch.csv; wc -l $RES/timeline-$batch.csv
done
grep -h '"batch"' $RES/gen.jsonl | python3 -c "import sys, json; [print(r['label'], r['batch'], round(r['ms_per_step'], 4)) for r in map(json.loads, sys.stdin)]"
gzip -9 $RES/timeline-*.csv
echo "done at $(( $(date +%s) - t0 )) s"
