#!/usr/bin/env bash
# GPU check of bf16 training without per-step weight casts: the multi-tensor AdamW kernel (float64 reference,
# bf16 working copies, more tensors than one launch holds), the working-copy and op-profiler tests, the core CUDA
# kernel tests (the dispatch now opens a profiler range), then GPT-2 small bf16 at batch 16 x 1024: retort with the
# old per-step casts and with working copies in the same binary, one step op by op (--profile-ops), and the
# PyTorch twins (eager sdpa, torch.compile sdpa) with their peak memory.
#   gpu-checks/bf16.sh BUILD_DIR     (repo root as cwd; about 2.5 minutes on an H100, most of it torch.compile)
set -uo pipefail
build=${1:?usage: gpu-checks/bf16.sh BUILD_DIR}
summary='^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure|error|Expected|Which is|actual'
echo "== optim: multi-tensor AdamW (CPU and CUDA), working copies at tp 1/2/4"
timeout 30 "$build/tests/retort_optim_tests" \
  --gtest_filter='AdamW*:WorkingCopies.*:TpWorkingCopies.*' 2>&1 | grep -E "$summary" | head -30
echo "== core: working copies, op profiler, CUDA kernels"
timeout 40 "$build/tests/retort_core_tests" \
  --gtest_filter='WorkingCopy.*:OpProfiler.*:Cuda*:DecoderOpsCuda.*' 2>&1 | grep -E "$summary" |
  grep -v '^\[       OK \]' | head -40
gpt2="--dtype bf16 --batch 16 --seq 1024 --vocab 50257 --layers 12 --heads 12 --embd 768 --warmup 2 --steps 6"
echo "== bench: GPT-2 small bf16, batch 16 x 1024 (JSON lines; the op table on stderr)"
timeout 35 "$build/bench/bench_train_throughput" --label gpt2-small-bf16-b16 --device cuda $gpt2 --per-step-casts
timeout 35 "$build/bench/bench_train_throughput" --label gpt2-small-bf16-b16 --device cuda $gpt2 --profile-ops
py=${PYTHON:-python3}
timeout 35 $py bench/train_throughput_torch.py --label gpt2-small-bf16-b16 --device cuda --attention sdpa $gpt2
# torch.compile gets what is left of the 3 minutes (its compile is most of it).
left=$((172 - SECONDS))
echo "== torch.compile twin (at most ${left} s)"
timeout "$left" $py bench/train_throughput_torch.py --label gpt2-small-bf16-b16 --device cuda --attention sdpa --compile \
  $gpt2
exit 0
