#!/usr/bin/env bash
# Call F: why the Llama-3.2-1B-shaped model decodes 8 and 16 rows slower than 32 (call E): the fused decode kernels
# against the unfused path (RETORT_DECODE_FUSED=0) at batches 1, 2, 4, 8, 16, 32, and Nsight Compute's kernel times of
# one fused step at batch 16 and one unfused.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r62; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r62' EXIT
tar xJf gpu/da5.tar.xz -C gpu; b=$PWD/gpu/da5; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
llama=(--label llama-1b-shape --family llama --vocab 128256 --context 1024 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000)
for k in fused unfused; do
  if [[ $k == unfused ]]; then export RETORT_DECODE_FUSED=0; else unset RETORT_DECODE_FUSED; fi
  timeout 200 $b/bench/bench_generate "${llama[@]}" --batches 1,2,4,8,16,32 --prompt 128 --new 64 --repeats 2 --json $RES/llama.jsonl > $RES/llama-$k.log 2>&1; echo "llama $k rc $?"
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv $b/bench/bench_generate "${llama[@]}" \
    --batches 16 --prompt 128 --new 4 --repeats 0 --graphs false > $RES/ncu-$k.csv 2> $RES/ncu-$k.err; echo "ncu $k rc $?"
done
unset RETORT_DECODE_FUSED
python3 -c "
import json
for r in map(json.loads, open('$RES/llama.jsonl')): print('llama', r['framework'], r['batch'], round(r['ms_per_step'],4), round(r['decode_tokens_per_s'],1))"
python3 bench/results/2026-11-26-h100-decode-fused/ncu_step.py $RES | head -40
