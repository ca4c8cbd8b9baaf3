#!/usr/bin/env bash
# Call D: decoding a Llama-3.2-1B-shaped model (32 query heads over 8 key/value heads, head size 64; random init,
# bf16, prompt 128, 128 new tokens) at batches 1, 8, 32 with the tensor-core cache attention (default) and the
# CUDA-core one (RETORT_DECODE_ATTENTION=lanes), from one binary; then GPT-2 small at batch 32 both ways again.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r60; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r60' EXIT
tar xJf gpu/da4.tar.xz -C gpu; b=$PWD/gpu/da4; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
llama=(--label llama-1b-shape --family llama --vocab 128256 --context 1024 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000)
for round in 1 2; do
  for k in auto lanes; do
    if [[ $k == lanes ]]; then export RETORT_DECODE_ATTENTION=lanes; else unset RETORT_DECODE_ATTENTION; fi
    timeout 200 $b/bench/bench_generate "${llama[@]}" --batches 1,8,32 --prompt 128 --new 128 --repeats 3 --json $RES/llama.jsonl > $RES/llama-$k-$round.log 2>&1; echo "llama $k round $round rc $?"
    timeout 100 $b/bench/bench_generate --batches 32 --prompt 128 --new 128 --repeats 3 --json $RES/gpt2.jsonl > $RES/gpt2-$k-$round.log 2>&1; echo "gpt2 $k round $round rc $?"
  done
done
unset RETORT_DECODE_ATTENTION
for f in llama gpt2; do python3 -c "
import json,sys
for r in map(json.loads, open('$RES/$f.jsonl')): print('$f', r['framework'], r['batch'], round(r['ms_per_step'],4), round(r['decode_tokens_per_s'],1))"; done
