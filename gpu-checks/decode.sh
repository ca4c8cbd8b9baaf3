#!/usr/bin/env bash
# GPU check of graph decoding (run from the repository root on a machine with a GPU, in under 3 minutes):
#   gpu-checks/decode.sh BUILD_DIR [OUT_DIR]
# 1. The generation tests on the GPU (graph vs no-graph tokens, bit for bit; the existing GPU generator, KV-cache
#    and sampler tests; the CPU tests of the inference copy and the static decode step).
# 2. The generation benchmark at GPT-2 small's shape, bf16, batch 1 and 32, greedy: retort with CUDA graphs,
#    retort without (retort-no-graphs), torch eager, torch.compile with a static cache in mode reduce-overhead
#    (bounded by COMPILE_TIMEOUT, 100 s by default: compiling takes about a minute per batch size).
# Prints one PASS/FAIL line per test suite, the benchmark JSON lines and the table; everything also lands in OUT_DIR
# (default runs/gpu-check-decode). Each peer appends its JSON line per batch size as it finishes, so a torch.compile
# that runs out of time still leaves its batch-1 line.
set -uo pipefail
build=${1:?usage: gpu-checks/decode.sh BUILD_DIR [OUT_DIR]}
out=${2:-runs/gpu-check-decode}
mkdir -p "$out"

echo "== generation tests on the GPU"
filter='GeneratorCuda.*:GptKvCacheCuda.*:VocabSamplerCuda.*:InferenceCopy.*:DecodeStep.*'
if timeout 25 "$build/tests/retort_parallel_tests" --gtest_filter="$filter" --gtest_brief=1 >"$out/tests.log" 2>&1; then
  echo "PASS generation tests (see $out/tests.log)"
else
  echo "FAIL generation tests (rc $?):"
  grep -E '^\[  FAILED  \]|Failure|error' "$out/tests.log" | head -30
fi
grep -E '^\[  (PASSED|SKIPPED|FAILED) ' "$out/tests.log" | head -20

echo "== generation benchmark"
RETORT_LOG_LEVEL=debug NEW=${NEW:-128} REPEATS=${REPEATS:-3} COMPILE_TIMEOUT=${COMPILE_TIMEOUT:-100} \
  timeout 150 bash bench/run_generate_bench.sh "$build" "$out/bench" >"$out/bench.log" 2>&1
echo "bench rc $?"
cat "$out/bench/retort.jsonl" "$out/bench/torch.jsonl" 2>/dev/null
[[ -f "$out/bench/table.md" ]] && cat "$out/bench/table.md" || tail -20 "$out/bench.log"
grep -h "failed\|timed out\|Error\|error\|CUDA graph\|skipping cudagraphs" "$out/bench.log" | head -10
