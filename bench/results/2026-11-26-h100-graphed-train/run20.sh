#!/usr/bin/env bash
# Call O: the Llama-3.2-1B-shaped model at 4 x 2048, eager and graphed, with three warm-up steps (two eager, one
# recording) outside the timing.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r20; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r20' EXIT
tar xJf gpu/f2.tar.xz -C gpu; b=$PWD/gpu/f2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
L=(--batch 4 --seq 2048 --vocab 128256 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000 --warmup 3 --steps 6)
for rep in 1 2; do
timeout 120 $b/bench/bench_train_throughput --label llama-1b-b4-eager --device cuda --dtype bf16 --family llama "${L[@]}" >> $RES/train.jsonl 2> $RES/llama-eager.err; echo "llama eager rc $?"
RETORT_LOG_LEVEL=info timeout 120 $b/bench/bench_train_throughput --label llama-1b-b4-graphs --device cuda --dtype bf16 --family llama --cuda-graphs "${L[@]}" >> $RES/train.jsonl 2> $RES/llama-graphs.err; echo "llama graphs rc $?"
done
grep "CUDA graph" $RES/llama-graphs.err | cut -c1-260
python3 - $RES/train.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    print(r.get('label'), round(r['tokens_per_s']), 'tok/s', round(r['ms_per_step'], 2), 'ms', round(r['peak_memory_gib'], 2), 'GiB', r.get('cuda_graphs'), r.get('graph_nodes'), r.get('warmup_steps'))
PY
