#!/usr/bin/env bash
# The final tree (the forward persistent at head size 128 up to T = 1024): SDPA beside it, both forward kernels'
# flash-only times, the GPU suites, the toy GPT, GPT-2 small training (eager and graphed).
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r6; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints --exclude="*.model" -C /tmp r6' EXIT
tar xJf gpu/p6.tar.xz -C gpu; b=$PWD/gpu/p6; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
mkdir -p /usr/share/games && tar xJf gpu/fortunes.tar.xz -C /usr/share/games
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
PATHS=flash REPEATS=5 timeout 200 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
tail -9 $RES/attention/table.md | cut -d'|' -f2-9
echo "at $(( $(date +%s) - t0 )) s"
( timeout 200 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 200 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
echo "at $(( $(date +%s) - t0 )) s"
timeout 100 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy > $RES/toy.log 2>&1; echo "toy rc $?"
grep -hE "step 1000: validation loss|train done" $RES/toy.log
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10 --batch 16)
timeout 60 $b/bench_train_throughput --label gpt2-b16 "${g[@]}" >> $RES/train.jsonl 2> $RES/train.err; echo "retort rc $?"
timeout 60 $b/bench_train_throughput --label gpt2-b16-graphs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs.err; echo "graphs rc $?"
python3 - $RES <<'PY'
import json, sys
for line in open(f"{sys.argv[1]}/train.jsonl"):
    line = line.strip()
    if not line.startswith("{"): continue
    r = json.loads(line)
    if "tokens_per_s" in r:
        print(r.get("label"), r.get("framework"), round(r["tokens_per_s"]), round(r["ms_per_step"], 2), round(r.get("peak_memory_gib", 0), 2))
PY
echo "done at $(( $(date +%s) - t0 )) s"
