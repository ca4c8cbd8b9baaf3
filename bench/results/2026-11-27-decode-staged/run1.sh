#!/usr/bin/env bash
# The decode attention's tiles staged in shared memory (cp.async, up to 4 tiles a warp in flight) against the
# register path (RETORT_DECODE_ATTENTION_STAGED=0), one binary: the attention tests under both and memcheck; the decode
# tests; GPT-2 small's decode at 1 to 32 rows and a Llama-3.2-1B shape at 32 (two rounds each); the kernel timeline of
# a batch-32 step under each, and of the fused per-op path at 32 rows (RETORT_DECODE_FUSED_MAX_ROWS=32), whose
# products without a norm (the out and MLP projections with their residual) are small_m_linear's; and the step with
# only those two products on small_m_linear past 16 rows (RETORT_DECODE_RESIDUAL_PRODUCTS_MAX_ROWS=32).
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/s1; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp s1' EXIT
tar xJf gpu/s1.tar.xz -C gpu; tar xJf gpu/tl.tar.xz -C gpu; b=$PWD/gpu/s1; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 200 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:*Graph*:*Generat*:*Sampl*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 200 $b/retort_core_tests --gtest_filter='AttentionWithCache*:*Attention*Cuda*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
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
  for st in 1 0; do
    RETORT_DECODE_ATTENTION_STAGED=$st timeout 100 $b/bench_generate "${gen[@]}" --batches 1,8,16,24,32 --label staged$st --json $RES/gen.jsonl > $RES/gen-staged$st-r$round.log 2>&1 || echo "staged$st rc $?"
    RETORT_DECODE_ATTENTION_STAGED=$st timeout 100 $b/bench_generate "${gen[@]}" "${llama[@]}" --batches 32 --label staged$st-llama --json $RES/gen.jsonl > $RES/gen-staged$st-llama-r$round.log 2>&1 || echo "staged$st llama rc $?"
  done
  RETORT_DECODE_RESIDUAL_PRODUCTS_MAX_ROWS=32 timeout 100 $b/bench_generate "${gen[@]}" --batches 24,32 --label resid --json $RES/gen.jsonl > $RES/gen-resid-r$round.log 2>&1 || echo "resid rc $?"
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
for v in staged1 staged0 fused32 resid; do
  case $v in staged1) e="RETORT_DECODE_ATTENTION_STAGED=1";; staged0) e="RETORT_DECODE_ATTENTION_STAGED=0";; fused32) e="RETORT_DECODE_FUSED_MAX_ROWS=32";; resid) e="RETORT_DECODE_RESIDUAL_PRODUCTS_MAX_ROWS=32";; esac
  env $e LD_LIBRARY_PATH=$b/devlibs:$PWD/gpu/tl CUDA_INJECTION64_PATH=$PWD/gpu/tl/libtimeline.so TIMELINE_CSV=$RES/timeline-$v.csv \
    timeout 120 $b/bench_generate "${tgen[@]}" --label traced-$v > $RES/gen-traced-$v.log 2>&1 || echo "traced $v rc $?"
  python3 bench/results/2026-11-27-decode-probe/analyze_timeline.py $RES/timeline-$v.csv > $RES/timeline-$v.txt 2>&1
  echo "== $v"; head -16 $RES/timeline-$v.txt | cut -c1-130
done
gzip -9 $RES/timeline-*.csv
echo "done at $(( $(date +%s) - t0 )) s"
