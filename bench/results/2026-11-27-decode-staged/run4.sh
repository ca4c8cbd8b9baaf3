#!/usr/bin/env bash
# LN1's add_partials_norm moving the layer's cached keys and values toward L2 while the q|k|v product runs, against the
# same binary without (RETORT_DECODE_CACHE_WARMUP=0): the GPU suites, memcheck on the new kernels and the decode tests,
# GPT-2 small's decode at 1 to 64 rows (two rounds each), the kernel timeline of a batch-32 step under each,
# torch.compile (reduce-overhead, static cache) at 1, 32 and 64 in the same call.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/s4; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp s4' EXIT
tar xJf gpu/s4.tar.xz -C gpu; tar xJf gpu/tl.tar.xz -C gpu; b=$PWD/gpu/s4; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 240 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:*Graph*:*Generat*:*Sampl*:DecodeFused.*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 240 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:LinearPartials*:AddPartialsNorm*:AttentionWithCache*:FusedLinear*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
timeout 150 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='LinearPartials*:AddPartialsNorm*' > $RES/memcheck-core.log 2>&1; echo "memcheck core rc $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck-core.log | head -3
timeout 200 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_parallel_tests --gtest_filter='DecodeFused.PartialProducts*:DecodeFused.GpuGraph*:VocabSamplerCuda.*' > $RES/memcheck-parallel.log 2>&1; echo "memcheck parallel rc $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck-parallel.log | head -3
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
for round in 1 2; do
  for pp in 1 0; do
    RETORT_DECODE_CACHE_WARMUP=$pp timeout 120 $b/bench_generate "${gen[@]}" --batches 1,8,16,24,32,48,64 --label warmup$pp --json $RES/gen.jsonl > $RES/gen-warmup$pp-r$round.log 2>&1 || echo "warmup$pp rc $?"
  done
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for line in open(f"{sys.argv[1]}/gen.jsonl"):
    r = json.loads(line); d[(r["label"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print("%-16s %3d  %s" % (label, batch, " / ".join("%.4f" % x for x in v)))
PY
echo "at $(( $(date +%s) - t0 )) s"
tgen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 1 --batches 32)
for pp in 1 0; do
  RETORT_DECODE_CACHE_WARMUP=$pp LD_LIBRARY_PATH=$b/devlibs:$PWD/gpu/tl CUDA_INJECTION64_PATH=$PWD/gpu/tl/libtimeline.so TIMELINE_CSV=$RES/timeline-warmup$pp.csv \
    timeout 120 $b/bench_generate "${tgen[@]}" --label traced-warmup$pp > $RES/gen-traced-warmup$pp.log 2>&1 || echo "traced $pp rc $?"
  python3 bench/results/2026-11-27-decode-probe/analyze_timeline.py $RES/timeline-warmup$pp.csv > $RES/timeline-warmup$pp.txt 2>&1
  echo "== warmup$pp"; head -16 $RES/timeline-warmup$pp.txt | cut -c1-130
done
gzip -9 $RES/timeline-*.csv
echo "at $(( $(date +%s) - t0 )) s"
timeout 280 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32,64 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch.log 2>&1; echo "torch rc $?"
grep '"batch"' $RES/torch.jsonl | python3 -c "import sys, json; [print(r['framework'], r['batch'], round(r['ms_per_step'], 4)) for r in map(json.loads, sys.stdin)]"
echo "done at $(( $(date +%s) - t0 )) s"
