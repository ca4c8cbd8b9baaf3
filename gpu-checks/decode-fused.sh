#!/usr/bin/env bash
# GPU check of the fused decode kernels (core/kernels/decode_kernels.h; run from the repository root on a machine
# with a GPU, in about 3 minutes without the torch.compile peer):
#   gpu-checks/decode-fused.sh BUILD_DIR [OUT_DIR]
# 1. The kernel tests (small_m_linear, embedding_sum and gpt_decode_layers against float64 math, on the CPU and the
#    GPU) and the model
#    tests (fused against unfused logits and greedy tokens on the GPU, decode_step against forward_cached bit for bit,
#    graph against eager tokens with programmatic dependent launch on and off), then the other generation tests on
#    the GPU, which decode on the fused path at their batches of 4 rows or fewer.
# 2. The generation benchmark at GPT-2 small's shape (bench/run_generate_bench.sh), bf16, greedy, prompt 128, NEW
#    (128) new tokens, BATCHES (1,32): retort (fused kernels, CUDA graphs), retort-unfused (RETORT_DECODE_FUSED=0,
#    the same binary), retort-no-pdl (RETORT_DECODE_PDL=0), retort-one-launch (RETORT_DECODE_LAYERS=1: every row count) and retort-per-op (RETORT_DECODE_LAYERS=0; the
#    default takes the one launch at 4 to 16 rows); torch eager and torch.compile (reduce-overhead) only with
#    PEERS=1 (torch.compile takes about a minute per batch size; COMPILE_TIMEOUT bounds it, 100 s by default).
# Prints one PASS/FAIL line per test binary, the benchmark JSON lines and the table; everything also lands in OUT_DIR
# (default runs/gpu-check-decode-fused).
set -uo pipefail
build=${1:?usage: gpu-checks/decode-fused.sh BUILD_DIR [OUT_DIR]}
out=${2:-runs/gpu-check-decode-fused}
mkdir -p "$out"
status=0

run_tests() {  # binary, filter, log name
  if timeout 120 "$build/tests/$1" --gtest_filter="$2" --gtest_brief=1 >"$out/$3.log" 2>&1; then
    echo "PASS $1 [$2] (see $out/$3.log)"
  else
    echo "FAIL $1 [$2] (rc $?):"
    grep -E '^\[  FAILED  \]|Failure|error' "$out/$3.log" | head -30
    status=1
  fi
  grep -E '^\[  (PASSED|SKIPPED|FAILED) ' "$out/$3.log" | head -10
}

echo "== decode kernel and model tests"
run_tests retort_core_tests 'SmallMLinear.*:EmbeddingSum.*:GptDecodeLayers.*:AttentionWithCache*' kernel-tests
run_tests retort_parallel_tests 'DecodeFused.*:DecodeStep.*:InferenceCopy.*' model-tests
echo "== generation tests on the GPU (now on the fused decode path)"
run_tests retort_parallel_tests 'GeneratorCuda.*:GptKvCacheCuda.*:VocabSamplerCuda.*:GptCuda.*' generation-tests

echo "== generation benchmark"
if [[ ${PEERS:-0} == 1 ]]; then peers=(EAGER=1 COMPILE=1); else peers=(EAGER=0 COMPILE=0); fi
env RETORT_LOG_LEVEL=debug NEW="${NEW:-128}" REPEATS="${REPEATS:-3}" BATCHES="${BATCHES:-1,32}" UNFUSED=1 NO_PDL=1 ONE_LAUNCH=1 \
  NO_GRAPHS="${NO_GRAPHS:-0}" COMPILE_TIMEOUT="${COMPILE_TIMEOUT:-100}" "${peers[@]}" \
  timeout 280 bash bench/run_generate_bench.sh "$build" "$out/bench" >"$out/bench.log" 2>&1
echo "bench rc $?"
cat "$out/bench/retort.jsonl" "$out/bench/torch.jsonl" 2>/dev/null
[[ -f "$out/bench/table.md" ]] && cat "$out/bench/table.md" || tail -20 "$out/bench.log"
grep -h "CUDA graph\|could not be captured\|failed\|timed out" "$out/bench.log" | head -10
exit $status
