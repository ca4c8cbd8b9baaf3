#!/usr/bin/env bash
# Final call B: the parallel and distill GPU suites (the distill tests read the fortunes corpus, which call A lacked); GPT-2 small training (bf16, vocabulary 50,304, batch 16 x 1024) eager and
# graphed beside torch.compile; the Llama-3.2-1B shape (head size 64) at batch 4 x 2048 beside transformers with SDPA;
# the toy GPT (retort train, bf16, 1000 steps) on the final kernels and on the mma.sync ones, same binary and seed.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r81; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints --exclude="*.model" -C /tmp r81' EXIT
tar xJf gpu/fvB.tar.xz -C gpu; b=$PWD/gpu/fvB; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 300 $b/tests/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:DecodeFused.*:DecodeStep.*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 300 $b/tests/retort_distill_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-distill.log 2>&1; echo "distill rc $?" > $RES/rc-distill ) &
timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-final > $RES/toy-final.log 2>&1; echo "toy final rc $?"
wait
for t in parallel distill; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-mma-sync > $RES/toy-mma-sync.log 2>&1; echo "toy mma.sync rc $?"
grep -hE "step 1000: validation loss|done:" $RES/toy-*.log
echo "toy done at $(( $(date +%s) - t0 )) s"
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10 --batch 16)
timeout 60 $b/bench/bench_train_throughput --label gpt2-b16 "${g[@]}" >> $RES/train.jsonl 2> $RES/train.err; echo "retort rc $?"
timeout 60 $b/bench/bench_train_throughput --label gpt2-b16-graphs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs.err; echo "graphs rc $?"
RETORT_FLASH_BACKWARD_SCHEDULE=lockstep timeout 60 $b/bench/bench_train_throughput --label gpt2-b16-lockstep "${g[@]}" >> $RES/train.jsonl 2> $RES/train-lockstep.err; echo "lockstep rc $?"
timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b16-compile --attention sdpa --compile "${g[@]}" >> $RES/train.jsonl 2> $RES/torch.err; echo "compile rc $?"
l=(--device cuda --dtype bf16 --batch 4 --seq 2048 --vocab 128256 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000 --warmup 2 --steps 5)
timeout 150 $b/bench/bench_train_throughput --label llama-1b-b4 --family llama "${l[@]}" >> $RES/llama.jsonl 2> $RES/llama.err; echo "retort llama rc $?"
RETORT_FLASH_BACKWARD_SCHEDULE=lockstep timeout 150 $b/bench/bench_train_throughput --label llama-1b-b4-lockstep --family llama "${l[@]}" >> $RES/llama.jsonl 2> $RES/llama-lockstep.err; echo "retort llama lockstep rc $?"
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
