#!/usr/bin/env bash
# The graphed decode step without copy and memset nodes (its inputs and results moved by kernels through mapped
# pinned memory) against the same binary with them (RETORT_DECODE_GRAPH_COPIES=nodes), GPT-2 small, batches 1 to
# 32, two rounds; the kernel timeline of both at batch 32 (timeline_injection.cpp); the GPU tests; torch.compile
# (reduce-overhead, static cache) at batches 1 and 32 in the same call.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r4; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r4' EXIT
tar xJf gpu/q3.tar.xz -C gpu; b=$PWD/gpu/q3; export LD_LIBRARY_PATH=$b/devlibs
tar xJf gpu/tl.tar.xz -C gpu
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 240 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:*Graph*:*Generat*:*Sampl*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 240 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
( RETORT_DECODE_GRAPH_COPIES=nodes timeout 240 $b/retort_parallel_tests --gtest_filter='*Graph*:*Generat*' > $RES/suite-nodes.log 2>&1; echo "nodes rc $?" > $RES/rc-nodes )
for t in core parallel nodes; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3 --batches 1,8,16,24,32)
for round in 1 2; do
  timeout 100 $b/bench_generate "${gen[@]}" --label kernels --json $RES/gen.jsonl > $RES/gen-kernels-r$round.log 2>&1 || echo "kernels rc $?"
  RETORT_DECODE_GRAPH_COPIES=nodes timeout 100 $b/bench_generate "${gen[@]}" --label nodes --json $RES/gen.jsonl > $RES/gen-nodes-r$round.log 2>&1 || echo "nodes rc $?"
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for line in open(f"{sys.argv[1]}/gen.jsonl"):
    r = json.loads(line); d[(r["label"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print("%-8s %3d  %s" % (label, batch, " / ".join("%.4f" % x for x in v)))
PY
tgen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 1 --batches 32)
for v in kernels nodes; do
  env $([ $v = nodes ] && echo RETORT_DECODE_GRAPH_COPIES=nodes) LD_LIBRARY_PATH=$b/devlibs:$PWD/gpu/tl CUDA_INJECTION64_PATH=$PWD/gpu/tl/libtimeline.so TIMELINE_CSV=$RES/timeline-$v.csv \
    timeout 120 $b/bench_generate "${tgen[@]}" --label traced-$v > $RES/gen-traced-$v.log 2>&1 || echo "traced $v rc $?"
done
gzip -9 $RES/timeline-*.csv
echo "at $(( $(date +%s) - t0 )) s"
timeout 300 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch.log 2>&1; echo "torch rc $?"
grep '"batch"' $RES/torch.jsonl | python3 -c "import sys, json; [print(r['framework'], r['batch'], round(r['ms_per_step'], 4)) for r in map(json.loads, sys.stdin)]"
echo "done at $(( $(date +%s) - t0 )) s"
