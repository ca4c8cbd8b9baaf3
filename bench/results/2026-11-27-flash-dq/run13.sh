#!/usr/bin/env bash
# Final validation (c1d229a: TMA loads in both passes, the dQ additions): the GPU tests of the core and parallel
# suites; the attention benchmark with SDPA; GPT-2 small and the Llama-3.2-1B shape training beside torch.compile and
# transformers.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r13; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints --exclude="*.model" -C /tmp r13' EXIT
tar xJf gpu/fv13.tar.xz -C gpu; b=$PWD/gpu/fv13; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 300 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 300 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
tail -9 $RES/attention/table.md | cut -d'|' -f2-9
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10 --batch 16)
timeout 60 $b/bench_train_throughput --label gpt2-b16 "${g[@]}" >> $RES/train.jsonl 2> $RES/train.err; echo "retort rc $?"
timeout 60 $b/bench_train_throughput --label gpt2-b16-graphs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs.err; echo "graphs rc $?"
timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b16-compile --attention sdpa --compile "${g[@]}" >> $RES/train.jsonl 2> $RES/torch.err; echo "compile rc $?"
l=(--device cuda --dtype bf16 --batch 4 --seq 2048 --vocab 128256 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000 --warmup 2 --steps 5)
timeout 150 $b/bench_train_throughput --label llama-1b-b4 --family llama "${l[@]}" >> $RES/llama.jsonl 2> $RES/llama.err; echo "retort llama rc $?"
timeout 200 python3 bench/train_throughput_hf.py --label llama-1b-b4 --attention sdpa "${l[@]}" >> $RES/llama.jsonl 2> $RES/llama-hf.err; echo "transformers sdpa rc $?"
python3 - $RES <<'PY'
import json, sys
for f in ("train.jsonl", "llama.jsonl"):
    for line in open(f"{sys.argv[1]}/{f}"):
        line = line.strip()
        if not line.startswith("{"): continue
        r = json.loads(line)
        if "tokens_per_s" in r:
            print(r.get("label"), r.get("framework"), round(r["tokens_per_s"]), round(r["ms_per_step"], 2), round(r.get("peak_memory_gib", 0), 2))
PY
echo "done at $(( $(date +%s) - t0 )) s"
