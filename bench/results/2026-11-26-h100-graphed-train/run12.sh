#!/usr/bin/env bash
# Call G (after the forward's constants moved to the device): graphed training steps. The optimizer's and the trainer's GPU tests (the graphed step against the eager
# loop), GPT-2 small at batch 16 and 8 with and without --cuda-graphs beside torch.compile, and the toy trainer on
# the GPU with train.cuda_graphs auto and off.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -e /work/main ]] || { mkdir -p /work && ln -s "$PWD" /work/main; }
t0=$(date +%s)
RES=/tmp/r12; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r12' EXIT
tar xJf gpu/t.tar.xz -C gpu; b=$PWD/gpu/t; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
F='*Cuda*:*Gpu*:AdamW*:GradNorm*:Graphed*:*Gpt*:*Llama*:*Qwen*:InferenceCopy.*:DecodeStep.*'
for t in optim distill parallel; do
  ( timeout 200 $b/tests/retort_${t}_tests --gtest_filter="$F" > $RES/tests-$t.log 2>&1; echo "$t rc $?" > $RES/rc-$t ) &
done
wait
for t in optim distill parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/tests-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-$t.log) skipped"
  grep -E '^\[  FAILED  \]|Failure|fell back' $RES/tests-$t.log | sort -u | head -20
done
grep -h "CUDA graph" $RES/tests-distill.log | head -4
echo "tests done at $(( $(date +%s) - t0 )) s"
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10)
for bs in 16 8; do
  timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-eager --batch $bs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-eager-$bs.err; echo "eager b$bs rc $?"
  RETORT_LOG_LEVEL=info timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-graphs --batch $bs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs-$bs.err; echo "graphs b$bs rc $?"
  tail -3 $RES/train-graphs-$bs.err
done
echo "retort bench done at $(( $(date +%s) - t0 )) s"
for bs in 16 8; do
  timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b$bs-compile --batch $bs --attention sdpa --compile "${g[@]}" >> $RES/train.jsonl 2> $RES/torch-$bs.err; echo "compile b$bs rc $?"
done
cut -c1-420 $RES/train.jsonl
echo "torch done at $(( $(date +%s) - t0 )) s"
for mode in auto off; do
  timeout 150 $b/retort train --device cuda model.dtype=bf16 train.cuda_graphs=$mode run.dir=$RES/toy-$mode > $RES/toy-$mode.log 2>&1; echo "toy $mode rc $?"
  grep -E "CUDA graph|validation loss|tokens/s" $RES/toy-$mode.log | tail -4
  mkdir -p $RES/toy-$mode-kept && cp $RES/toy-$mode/metrics.jsonl $RES/toy-$mode/*.json $RES/toy-$mode-kept/ 2>/dev/null; rm -rf $RES/toy-$mode
done
echo "all done at $(( $(date +%s) - t0 )) s"
