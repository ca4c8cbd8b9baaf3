#!/usr/bin/env bash
# 4db7082: the partial-sum norm holding its slices at once only up to 256 threads a row (run7.sh's build failed
# AddPartialsNorm's 8,192-wide case: too many registers for 1024 threads). The partial-product and norm tests,
# memcheck on them, the decode and generation tests, and GPT-2 small's decode beside torch.compile, three rounds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/f8; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp f8' EXIT
tar xJf gpu/f8.tar.xz -C gpu; b=$PWD/gpu/f8; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 120 $b/retort_core_tests --gtest_filter='LinearPartials*:AddPartialsNorm*:AttentionWithCache*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
( timeout 120 $b/retort_parallel_tests --gtest_filter='DecodeFused.*:GeneratorCuda.*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' -A3 $RES/suite-$t.log | head -12
done
timeout 90 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='AddPartialsNorm*:LinearPartials*' > $RES/memcheck-core.log 2>&1; echo "memcheck core rc $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck-core.log | head -3
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
for round in 1 2 3; do
  timeout 40 $b/bench_generate "${gen[@]}" --batches 1,32 --label retort --json $RES/gen.jsonl > $RES/gen-r$round.log 2>&1 || echo "retort rc $?"
  timeout 100 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch-r$round.log 2>&1 || echo "torch rc $?"
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
gzip -9 $RES/*.log
echo "done at $(( $(date +%s) - t0 )) s"
