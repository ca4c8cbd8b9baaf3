#!/usr/bin/env bash
# Call H: the wgmma kernels as they stand (backward with the atomics beside the next products, descriptors built
# once). GPU tests on the default kernels and each mma.sync switch; the attention benchmark against PyTorch SDPA;
# GPT-2 small training (bf16, vocabulary 50,304) at batch 16 and 8 on the wgmma kernels and on the mma.sync ones,
# beside torch.compile; the toy GPT (retort train, bf16) on both, for the loss curves.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r43; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints -C /tmp r43' EXIT
tar xJf gpu/fa5.tar.xz -C gpu; b=$PWD/gpu/fa5; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
OLD=(RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma)
for v in default RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma; do
  env $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*:Ops/OpCudaVsCpu.*/causal*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests-${v//=/-}.log | head -12
done
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $? at $(( $(date +%s) - t0 )) s"
cat $RES/attention/table.md
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10)
for bs in 16 8; do
  timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-wgmma --batch $bs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-wgmma-$bs.err; echo "wgmma b$bs rc $?"
  env "${OLD[@]}" timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-mma-sync --batch $bs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-mma-$bs.err; echo "mma.sync b$bs rc $?"
  timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-wgmma-graphs --batch $bs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-wgmma-graphs-$bs.err; echo "wgmma graphs b$bs rc $?"
done
for bs in 16 8; do
  timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b$bs-compile --batch $bs --attention sdpa --compile "${g[@]}" >> $RES/train.jsonl 2> $RES/torch-$bs.err; echo "compile b$bs rc $?"
done
cut -c1-300 $RES/train.jsonl
echo "train bench done at $(( $(date +%s) - t0 )) s"
timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-wgmma > $RES/toy-wgmma.log 2>&1; echo "toy wgmma rc $?"
env "${OLD[@]}" timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-mma-sync > $RES/toy-mma-sync.log 2>&1; echo "toy mma.sync rc $?"
grep -hE "validation loss|tokens/s" $RES/toy-*.log | tail -6
echo "done at $(( $(date +%s) - t0 )) s"
