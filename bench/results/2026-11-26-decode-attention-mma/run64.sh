#!/usr/bin/env bash
# Call H (the session's final code, call G's build): decoding the Llama-3.2-1B shape at batches 1, 2, 4, 8, 16, 32
# (fused at one row only now) against the unfused path, and GPT-2 small at batches 1, 8, 16, 32 with the CUDA-core
# cache attention and torch.compile reduce-overhead in the same call.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r64; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints -C /tmp r64' EXIT
tar xJf gpu/da6.tar.xz -C gpu; b=$PWD/gpu/da6; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
llama=(--label llama-1b-shape --family llama --vocab 128256 --context 1024 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000)
for k in default unfused; do
  if [[ $k == unfused ]]; then export RETORT_DECODE_FUSED=0; else unset RETORT_DECODE_FUSED; fi
  timeout 200 $b/bench/bench_generate "${llama[@]}" --batches 1,2,4,8,16,32 --prompt 128 --new 128 --repeats 3 --json $RES/llama.jsonl > $RES/llama-$k.log 2>&1; echo "llama $k rc $?"
done
unset RETORT_DECODE_FUSED
python3 -c "
import json
for r in map(json.loads, open('$RES/llama.jsonl')): print('llama', r['framework'], r['batch'], round(r['ms_per_step'],4), round(r['decode_tokens_per_s'],1))"
echo "llama done at $(( $(date +%s) - t0 )) s"
env NEW=128 REPEATS=3 BATCHES=1,8,16,32 UNFUSED=0 LANES=1 NO_GRAPHS=0 EAGER=0 COMPILE=1 COMPILE_TIMEOUT=300 \
  timeout 400 bash bench/run_generate_bench.sh $b $RES/bench > $RES/bench.log 2>&1; echo "bench rc $? at $(( $(date +%s) - t0 )) s"
cat $RES/bench/table.md 2>/dev/null || tail -20 $RES/bench.log
