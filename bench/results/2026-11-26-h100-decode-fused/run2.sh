#!/usr/bin/env bash
# Call 2 of the fused decode work on one H100, after the second round of kernel changes (one_row_kernel, folded sums,
# the 16-warp decode attention launched as a programmatic dependent): the kernel, model and generation tests on the
# GPU (gpu-checks/decode-fused.sh), the generation benchmark at GPT-2 small's shape, bf16, greedy, prompt 128, 128
# new tokens, batches 1, 2, 4, 8 and 32, fused (with and without programmatic dependent launch) and unfused in one
# binary; the torch.compile (reduce-overhead, static cache) peer at batch 1 in the same call; Nsight Compute's
# duration of every kernel of a fused decode step at batch 1 (no graphs). Results in $OUT/r2.tgz.
set -uo pipefail
t0=$(date +%s)
tar xJf gpu/dec.tar.xz -C gpu
b=$PWD/gpu/dec
export LD_LIBRARY_PATH=$b/devlibs RETORT_COMMIT=$(cat $b/commit.txt)
cd "$b"
R=/tmp/r2; mkdir -p $R; trap 'tar czf $OUT/r2.tgz -C /tmp r2' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
echo "commit $RETORT_COMMIT"
BATCHES=1,2,4,8,32 NEW=128 REPEATS=5 PEERS=0 timeout 200 bash gpu-checks/decode-fused.sh . $R/check 2>&1 | tee $R/check.txt
echo "check done at $(( $(date +%s) - t0 )) s"
shape=(--label gpt2-small --device cuda --dtype bf16 --batches 1 --prompt 128 --new 128 --repeats 3 --temperature 0
  --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
timeout 110 python3 bench/generate_bench_torch.py "${shape[@]}" --compile --compile-mode reduce-overhead \
  --json $R/torch.jsonl > $R/torch-compile.log 2>&1; echo "torch.compile rc $? at $(( $(date +%s) - t0 )) s"
cat $R/torch.jsonl 2>/dev/null
timeout 40 ncu --clock-control none --metrics gpu__time_duration.sum --print-units base --csv ./bench/bench_generate \
  --batches 1 --prompt 128 --new 4 --repeats 0 --graphs false > $R/ncu-fused.csv 2> $R/ncu-fused.err
echo "ncu rc $?"
python3 ncu_step.py $R 2>&1 | tee $R/ncu-step.txt | head -12
echo "all done at $(( $(date +%s) - t0 )) s"
