#!/usr/bin/env bash
# GPU check of `retort distill compare`: its CPU tests (method overrides, the table against `retort eval`, cache bytes
# from the files, resume), then the comparison itself at the larger GPU size (configs/distill-gpu.yaml: a 4 x 256
# teacher of 1500 steps, 2 x 128 students of 1000 steps, 256-token context, k = 64) on one GPU, every method from the
# same teacher, printing the table (compare.md) and compare.json. distill.sample_k=48 gives the sampled cache the
# top-k cache's bytes a token (48 draws in bf16: 4 x 48 + 2 x 48 + 2 x 48 + 4 = 388 = 4 x 64 + 2 x 64 + 4).
#   gpu-checks/compare.sh BUILD_DIR     (repo root as cwd; about a minute and a half on an H100, 170 s at most)
set -uo pipefail
build=${1:?usage: gpu-checks/compare.sh BUILD_DIR}
summary='^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure|error|Expected|Which is|actual'
echo "== distill compare: CPU tests"
timeout 60 "$build/tests/retort_distill_tests" --gtest_filter='DistillCompare.*' 2>&1 | grep -E "$summary" | head -30
out=${COMPARE_DIR:-/tmp/retort-compare-gpu}
rm -rf "$out"
left=$((170 - SECONDS))
echo "== retort distill compare --config configs/distill-gpu.yaml --device cuda (at most ${left} s)"
start=$SECONDS
timeout "$left" "$build/apps/retort" distill compare --config configs/distill-gpu.yaml --device cuda \
  run.dir="$out" distill.sample_k=48 2> "$out.log" | tail -20
echo "exit $? after $((SECONDS - start)) s; progress lines:"
grep -E 'distill compare' "$out.log" | cut -c1-220 | tail -14
[ -f "$out/compare.json" ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
print(json.dumps({'teacher': d['teacher'], 'methods': [{k: m.get(k) for k in ('name','available','eval', \
'cache_bytes_per_token','cache_seconds','train_seconds')} for m in d['methods']]}))" "$out/compare.json"
exit 0
