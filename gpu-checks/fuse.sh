#!/usr/bin/env bash
# GPU check of the fused training-step kernels: cuBLASLt bias / bias+GELU / bias-gradient epilogues and the fused
# residual add + LayerNorm / RMSNorm.
#   gpu-checks/fuse.sh BUILD_DIR        (repository root as the working directory; about 2 minutes on an H100)
# 1. the CUDA tests of the new kernels and ops (kernel tests against the CPU, the op table's GPU rows for them and
#    for linear / the norms), and the model tests (GPU fused vs unfused vs CPU, GPT and Llama on the GPU);
# 2. retort_op_timing for linear, linear_gelu and the norms (fused on and off);
# 3. bench_train_throughput, GPT-2 small bf16, batch 16 x 1024, with the fused kernels on and off
#    (RETORT_FUSED_KERNELS=0) in the same binary, one JSON line each, then the ratio. A warning on stderr names any
#    product whose cuBLASLt epilogue fell back to separate kernels.
set -uo pipefail
build=${1:?build dir}
status=0

run_tests() {  # binary, filter
  local log
  log=$(mktemp)
  timeout 240 "$build/tests/$1" --gtest_filter="$2" --gtest_brief=1 >"$log" 2>&1
  local rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|Failure|error" "$log" | head -40
  echo "tests $1 [$2]: exit $rc"
  [[ $rc -eq 0 ]] || status=1
  rm -f "$log"
}

run_tests retort_core_tests \
  'FusedResidualNorm*:FusedLinear*:Ops/OpCudaVsCpu.*/linear*:Ops/OpCudaVsCpu.*/add_*:Ops/OpCudaVsCpu.*/layer_norm:Ops/OpCudaVsCpu.*/rms_norm:Ops/OpGradcheck.*/linear_gelu:Ops/OpGradcheck.*/add_*'
run_tests retort_parallel_tests 'FusedKernelsModel.*:GptCuda.*:TpGptNccl.*'

# Per-op times at GPT-2 small's shapes (bf16): the fused ops against the same ops with the fused kernels off.
for fused in 1 0; do
  echo "retort_op_timing, RETORT_FUSED_KERNELS=$fused"
  for filter in linear norm; do
    RETORT_FUSED_KERNELS=$fused timeout 60 "$build/tests/retort_op_timing" --device cuda --runs 10 --filter "$filter" \
      | grep -v "^core op timing\|^op " || status=1
  done
done

bench=(--device cuda --dtype bf16 --batch 16 --seq 1024 --vocab 50257 --layers 12 --heads 12 --embd 768
       --warmup 3 --steps 10)
out=$(mktemp)
RETORT_FUSED_KERNELS=1 timeout 150 "$build/bench/bench_train_throughput" --label gpt2-small-bf16-b16-fused \
  "${bench[@]}" | tee -a "$out" || status=1
RETORT_FUSED_KERNELS=0 timeout 150 "$build/bench/bench_train_throughput" --label gpt2-small-bf16-b16-unfused \
  "${bench[@]}" | tee -a "$out" || status=1
python3 - "$out" <<'PY'
import json, sys
rows = {json.loads(l)["label"]: json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")}
f, u = rows.get("gpt2-small-bf16-b16-fused"), rows.get("gpt2-small-bf16-b16-unfused")
if f and u:
    print(f"fused {f['ms_per_step']:.2f} ms/step, unfused {u['ms_per_step']:.2f} ms/step, "
          f"speed-up {u['ms_per_step'] / f['ms_per_step']:.3f}x")
PY
rm -f "$out"
echo "fuse.sh: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
exit $status
