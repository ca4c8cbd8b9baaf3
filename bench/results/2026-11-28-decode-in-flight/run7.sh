#!/usr/bin/env bash
# 5392a3d: the partial-sum norm loading its slices at once and the attention reading its second tile ahead, on
# top of run3.sh (1589f41): the GPU suites (attention, partial products, decode, generation), memcheck on the
# attention, the partial-sum norm and the in-flight tests, the batch-32 kernel timeline (against f3/timeline-32.txt
# when the card is an H100), and GPT-2 small's decode beside torch.compile, three rounds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/f7; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp f7' EXIT
tar xJf gpu/f7.tar.xz -C gpu; b=$PWD/gpu/f7; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 240 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:*Graph*:*Generat*:*Sampl*:DecodeFused.*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 240 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:LinearPartials*:AddPartialsNorm*:AttentionWithCache*:FusedLinear*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' -A3 $RES/suite-$t.log | head -12
done
timeout 150 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='AttentionWithCacheMma*:AddPartialsNorm*' > $RES/memcheck-core.log 2>&1; echo "memcheck core rc $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck-core.log | head -3
timeout 150 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_parallel_tests --gtest_filter='GeneratorCuda.AStepFedOnTheDevice*:GeneratorCuda.StepsInFlight*:VocabSamplerCuda.*' > $RES/memcheck-parallel.log 2>&1; echo "memcheck parallel rc $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck-parallel.log | head -3
echo "at $(( $(date +%s) - t0 )) s"
LD_LIBRARY_PATH=$b/devlibs:$PWD/gpu/tl CUDA_INJECTION64_PATH=$PWD/gpu/tl/libtimeline.so TIMELINE_CSV=$RES/timeline-32.csv \
  timeout 60 $b/bench_generate --device cuda --dtype bf16 --prompt 128 --new 128 --repeats 1 --batches 32 --label traced > $RES/gen-traced.log 2>&1 || echo "traced rc $?"
python3 bench/results/2026-11-27-decode-probe/analyze_timeline.py $RES/timeline-32.csv > $RES/timeline-32.txt 2>&1
sed -n 1,16p $RES/timeline-32.txt | cut -c1-150; tail -2 $RES/timeline-32.txt
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
for round in 1 2 3; do
  timeout 60 $b/bench_generate "${gen[@]}" --batches 1,32 --label retort --json $RES/gen.jsonl > $RES/gen-r$round.log 2>&1 || echo "retort rc $?"
  timeout 150 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch-r$round.log 2>&1 || echo "torch rc $?"
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
gzip -9 $RES/*.log $RES/*.csv
echo "done at $(( $(date +%s) - t0 )) s"
