#!/usr/bin/env bash
# Call I: where the graphed step's extra time at GPT-2 scale goes: eager, the graphed step's work enqueued eagerly,
# and the graphs, at batch 16 (and the arena tests).
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r14; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r14' EXIT
tar xJf gpu/t.tar.xz -C gpu; b=$PWD/gpu/t; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
which nsys ncu 2>&1 | head -2
timeout 60 $b/tests/retort_core_tests --gtest_filter='ArenaOffsets*:CaptureArena*' > $RES/tests-core.log 2>&1; echo "core rc $?"
timeout 60 $b/tests/retort_distill_tests --gtest_filter='Graphed*' > $RES/tests-distill.log 2>&1; echo "distill rc $?"
grep -h "CUDA graph" $RES/tests-distill.log | head -2
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10 --batch 16)
for v in "eager" "graphs --cuda-graphs" "work-eager --cuda-graphs --graphed-work-eager" "graphs2 --cuda-graphs"; do
  set -- $v; l=$1; shift
  RETORT_LOG_LEVEL=info timeout 60 $b/bench/bench_train_throughput --label gpt2-b16-$l "$@" "${g[@]}" >> $RES/train.jsonl 2> $RES/train-$l.err; echo "$l rc $?"
  grep "CUDA graph" $RES/train-$l.err | cut -c1-200
done
python3 -c "
import json
for l in open('$RES/train.jsonl'):
    r=json.loads(l); print(r['label'], round(r['ms_per_step'],2), 'ms', round(r['peak_memory_gib'],2), 'GiB', r['cuda_graphs'], r['graph_nodes'])"
echo "all done at $(( $(date +%s) - t0 )) s"
