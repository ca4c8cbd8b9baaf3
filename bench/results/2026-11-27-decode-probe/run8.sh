#!/usr/bin/env bash
# 86d2434 (the GELU epilogues through one helper, the step's copies through one): the GPU suites (the graphed decode's token tests with its copies as kernels and as
# nodes), compute-sanitizer memcheck on the graphed decode tests, the toy GPT, GPT-2 small's decode at batches 1 to
# 32 (two rounds) with torch.compile (reduce-overhead) at 1 and 32 in the same call.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r8; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints --exclude="*.model" --exclude=run_tokenizer.json -C /tmp r8' EXIT
tar xJf gpu/q7.tar.xz -C gpu; b=$PWD/gpu/q7; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
mkdir -p /usr/share/games && tar xJf gpu/fortunes.tar.xz -C /usr/share/games
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 240 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:*Graph*:*Generat*:*Sampl*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 240 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:FusedLinear*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
( RETORT_DECODE_GRAPH_COPIES=nodes timeout 200 $b/retort_parallel_tests --gtest_filter='*Graph*:*Generat*' > $RES/suite-nodes.log 2>&1; echo "nodes rc $?" > $RES/rc-nodes )
for t in core parallel nodes; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
echo "at $(( $(date +%s) - t0 )) s"
timeout 200 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_parallel_tests --gtest_filter='GeneratorCuda.*:VocabSamplerCuda.*' > $RES/memcheck.log 2>&1; echo "memcheck rc $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck.log | head -5
echo "at $(( $(date +%s) - t0 )) s"
timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy > $RES/toy.log 2>&1; echo "toy rc $?"
grep -hE "step 1000: validation loss|train done" $RES/toy.log
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3 --batches 1,8,16,24,32)
for round in 1 2; do
  timeout 100 $b/bench_generate "${gen[@]}" --label final --json $RES/gen.jsonl > $RES/gen-r$round.log 2>&1 || echo "gen rc $?"
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for line in open(f"{sys.argv[1]}/gen.jsonl"):
    r = json.loads(line); d[(r["label"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print("%-8s %3d  %s" % (label, batch, " / ".join("%.4f" % x for x in v)))
PY
echo "at $(( $(date +%s) - t0 )) s"
timeout 300 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch.log 2>&1; echo "torch rc $?"
grep '"batch"' $RES/torch.jsonl | python3 -c "import sys, json; [print(r['framework'], r['batch'], round(r['ms_per_step'], 4)) for r in map(json.loads, sys.stdin)]"
echo "done at $(( $(date +%s) - t0 )) s"
