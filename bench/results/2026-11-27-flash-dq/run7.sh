#!/usr/bin/env bash
# Validation of the dQ additions (50d2302's kernels): the flash and attention tests, the parallel GPU suite; GPT-2
# small training (bf16, vocabulary 50,304, batch 16 x 1024) eager and graphed beside torch.compile, and with the old
# row-order atomics (RETORT_FLASH_BACKWARD_DQ=rows); the Llama-3.2-1B shape (head size 64) at batch 4 x 2048 beside
# transformers with SDPA; the toy GPT (retort train, bf16, 1000 steps) with the new and the old dQ additions, same
# binary and seed.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r7; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints --exclude="*.model" -C /tmp r7' EXIT
tar xJf gpu/fv7.tar.xz -C gpu; b=$PWD/gpu/fv7; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
mkdir -p /usr/share/games && tar xJf gpu/fortunes.tar.xz -C /usr/share/games
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 300 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 300 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-new > $RES/toy-new.log 2>&1; echo "toy new rc $?"
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
RETORT_FLASH_BACKWARD_DQ=rows timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-rows > $RES/toy-rows.log 2>&1; echo "toy rows rc $?"
grep -hE "step 1000: validation loss|done:" $RES/toy-*.log
echo "toy done at $(( $(date +%s) - t0 )) s"
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10 --batch 16)
timeout 60 $b/bench_train_throughput --label gpt2-b16 "${g[@]}" >> $RES/train.jsonl 2> $RES/train.err; echo "retort rc $?"
timeout 60 $b/bench_train_throughput --label gpt2-b16-graphs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs.err; echo "graphs rc $?"
RETORT_FLASH_BACKWARD_DQ=rows timeout 60 $b/bench_train_throughput --label gpt2-b16-dq-rows "${g[@]}" >> $RES/train.jsonl 2> $RES/train-rows.err; echo "rows rc $?"
timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b16-compile --attention sdpa --compile "${g[@]}" >> $RES/train.jsonl 2> $RES/torch.err; echo "compile rc $?"
l=(--device cuda --dtype bf16 --batch 4 --seq 2048 --vocab 128256 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000 --warmup 2 --steps 5)
timeout 150 $b/bench_train_throughput --label llama-1b-b4 --family llama "${l[@]}" >> $RES/llama.jsonl 2> $RES/llama.err; echo "retort llama rc $?"
RETORT_FLASH_BACKWARD_DQ=rows timeout 150 $b/bench_train_throughput --label llama-1b-b4-dq-rows --family llama "${l[@]}" >> $RES/llama.jsonl 2> $RES/llama-rows.err; echo "retort llama rows rc $?"
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
