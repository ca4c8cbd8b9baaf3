#!/usr/bin/env bash
# The tensor-core decode attention's L2 prefetch before the wait kept up to 16 rows only (a44a4bc) against 86d2434 in one call:
# the GPU suites and memcheck on the attention tests, then GPT-2 small's decode at 1 to 32 rows (two rounds), 12
# and 16 rows also on the per-op fused path (RETORT_DECODE_LAYERS=0, whose products do let the attention start
# early), a Llama-3.2-1B shape at 32 rows, torch.compile (reduce-overhead) at 32.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r11; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r11' EXIT
tar xJf gpu/q10.tar.xz -C gpu; b=$PWD/gpu/q10; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 240 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:*Graph*:*Generat*:*Sampl*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 240 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:AttentionWithCache*:FusedLinear*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
timeout 150 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='AttentionWithCacheMma*' > $RES/memcheck.log 2>&1; echo "memcheck rc $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck.log | head -3
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
llama=(--family llama --vocab 128256 --context 1024 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000)
for round in 1 2; do
  for bin in bench_generate bench_generate_86d2434; do
    l=$([ $bin = bench_generate ] && echo now || echo 86d2434)
    timeout 100 $b/$bin "${gen[@]}" --batches 1,8,16,24,32 --label $l --json $RES/gen.jsonl > $RES/gen-$l-r$round.log 2>&1 || echo "$l rc $?"
    RETORT_DECODE_LAYERS=0 timeout 60 $b/$bin "${gen[@]}" --batches 12,16 --label $l-per-op --json $RES/gen.jsonl > $RES/gen-$l-per-op-r$round.log 2>&1 || echo "$l per-op rc $?"
    timeout 100 $b/$bin "${gen[@]}" "${llama[@]}" --batches 32 --label $l-llama --json $RES/gen.jsonl > $RES/gen-$l-llama-r$round.log 2>&1 || echo "$l llama rc $?"
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
timeout 300 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch.log 2>&1; echo "torch rc $?"
grep '"batch"' $RES/torch.jsonl | python3 -c "import sys, json; [print(r['framework'], r['batch'], round(r['ms_per_step'], 4)) for r in map(json.loads, sys.stdin)]"
echo "done at $(( $(date +%s) - t0 )) s"
