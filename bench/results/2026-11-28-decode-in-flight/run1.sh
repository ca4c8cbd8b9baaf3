#!/usr/bin/env bash
# Decode steps in flight (the host launches the next graphed step before it reads this one's tokens) against one step
# at a time (RETORT_DECODE_PIPELINE=0), the same binary: the generation GPU tests, memcheck on the new ones, GPT-2
# small's decode at batches 1, 32 and 64 alternating with torch.compile (reduce-overhead, static cache) in three
# rounds, and the kernel timeline of a batch-32 step under each (the GPU's idle time between replays).
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/f1; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp f1' EXIT
tar xJf gpu/f1.tar.xz -C gpu; tar xJf gpu/tl.tar.xz -C gpu; b=$PWD/gpu/f1; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/retort_parallel_tests --gtest_filter='GeneratorCuda.*:DecodeFused.*:VocabSamplerCuda.*:*Graph*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?"
echo "$(grep -c '^\[       OK' $RES/suite-parallel.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-parallel.log) skipped"
grep -E '^\[  FAILED  \]|Failure' -A4 $RES/suite-parallel.log | head -30
timeout 150 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_parallel_tests --gtest_filter='GeneratorCuda.AStepFedOnTheDevice*:GeneratorCuda.StepsInFlight*' > $RES/memcheck.log 2>&1; echo "memcheck rc $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck.log | head -3
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
for round in 1 2 3; do
  timeout 60 $b/bench_generate "${gen[@]}" --batches 1,32,64 --label in-flight --json $RES/gen.jsonl > $RES/gen-in-flight-r$round.log 2>&1 || echo "in-flight rc $?"
  RETORT_DECODE_PIPELINE=0 timeout 60 $b/bench_generate "${gen[@]}" --batches 1,32,64 --label one-at-a-time --json $RES/gen.jsonl > $RES/gen-one-r$round.log 2>&1 || echo "one rc $?"
  timeout 150 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32,64 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch-r$round.log 2>&1 || echo "torch rc $?"
  echo "round $round at $(( $(date +%s) - t0 )) s"
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for f in ("gen.jsonl", "torch.jsonl"):
    for line in open(f"{sys.argv[1]}/{f}"):
        r = json.loads(line)
        if "batch" not in r: continue
        d[(r["label"] if f == "gen.jsonl" else r["framework"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print("%-32s %3d  %s" % (label, batch, " / ".join("%.4f" % x for x in v)))
PY
tgen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 1 --batches 32)
for p in 1 0; do
  RETORT_DECODE_PIPELINE=$p LD_LIBRARY_PATH=$b/devlibs:$PWD/gpu/tl CUDA_INJECTION64_PATH=$PWD/gpu/tl/libtimeline.so TIMELINE_CSV=$RES/timeline-pipeline$p.csv \
    timeout 60 $b/bench_generate "${tgen[@]}" --label traced-pipeline$p > $RES/gen-traced-pipeline$p.log 2>&1 || echo "traced $p rc $?"
  python3 bench/results/2026-11-27-decode-probe/analyze_timeline.py $RES/timeline-pipeline$p.csv > $RES/timeline-pipeline$p.txt 2>&1
  echo "== pipeline $p"; sed -n 1,5p $RES/timeline-pipeline$p.txt; tail -2 $RES/timeline-pipeline$p.txt
done
gzip -9 $RES/timeline-*.csv $RES/*.log
echo "done at $(( $(date +%s) - t0 )) s"
