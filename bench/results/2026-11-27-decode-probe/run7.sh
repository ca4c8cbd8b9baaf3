#!/usr/bin/env bash
# linear_gelu without a tape through the GELU epilogue that does not write its input (44fa680) against a9e3605 in
# one call: the GPU suites, the toy GPT (its validation passes run without a tape), GPT-2 small's decode at batches
# 1 to 32 (two rounds each) and its batch-32 kernel timeline, torch.compile (reduce-overhead) at 32.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r7; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints --exclude="*.model" -C /tmp r7' EXIT
tar xJf gpu/q6.tar.xz -C gpu; b=$PWD/gpu/q6; export LD_LIBRARY_PATH=$b/devlibs
tar xJf gpu/tl.tar.xz -C gpu
export RETORT_COMMIT=$(cat gpu/commit.txt)
mkdir -p /usr/share/games && tar xJf gpu/fortunes.tar.xz -C /usr/share/games
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 240 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 240 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:FusedLinear*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
echo "at $(( $(date +%s) - t0 )) s"
timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy > $RES/toy.log 2>&1; echo "toy rc $?"
grep -hE "step 1000: validation loss|train done" $RES/toy.log
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3 --batches 1,8,16,24,32)
for round in 1 2; do
  timeout 100 $b/bench_generate "${gen[@]}" --label now --json $RES/gen.jsonl > $RES/gen-now-r$round.log 2>&1 || echo "now rc $?"
  timeout 100 $b/bench_generate_a9e3605 "${gen[@]}" --label a9e3605 --json $RES/gen.jsonl > $RES/gen-a9e3605-r$round.log 2>&1 || echo "a9e3605 rc $?"
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for line in open(f"{sys.argv[1]}/gen.jsonl"):
    r = json.loads(line); d[(r["label"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print("%-8s %3d  %s" % (label, batch, " / ".join("%.4f" % x for x in v)))
PY
LD_LIBRARY_PATH=$b/devlibs:$PWD/gpu/tl CUDA_INJECTION64_PATH=$PWD/gpu/tl/libtimeline.so TIMELINE_CSV=$RES/timeline-now.csv \
  timeout 120 $b/bench_generate --device cuda --dtype bf16 --prompt 128 --new 128 --repeats 1 --batches 32 --label traced > $RES/gen-traced.log 2>&1 || echo "traced rc $?"
python3 bench/results/2026-11-27-decode-probe/analyze_timeline.py $RES/timeline-now.csv | head -12
gzip -9 $RES/timeline-now.csv
echo "at $(( $(date +%s) - t0 )) s"
timeout 300 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 32 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch.log 2>&1; echo "torch rc $?"
grep '"batch"' $RES/torch.jsonl | python3 -c "import sys, json; [print(r['framework'], r['batch'], round(r['ms_per_step'], 4)) for r in map(json.loads, sys.stdin)]"
echo "done at $(( $(date +%s) - t0 )) s"
