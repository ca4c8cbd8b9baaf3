#!/usr/bin/env bash
# The decode attention reading the next layer's cache toward L2 (RETORT_DECODE_AHEAD=0 turns it off) and an
# 8-warp block (RETORT_DECODE_ATTENTION_WARPS=8, a probe), both in 586534a (the bundle was made from its tree before
# the commit, so the lines name c5c3dcc; reverted after): GPU tests, then GPT-2 small at batch 24 and 32 and a
# Llama-3.2-1B shape at 32, every variant in one binary, two rounds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r2; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r2' EXIT
tar xJf gpu/q1.tar.xz -C gpu; b=$PWD/gpu/q1; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 240 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 240 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:AttentionWithCache*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
( RETORT_DECODE_ATTENTION_WARPS=8 timeout 120 $b/retort_core_tests --gtest_filter='AttentionWithCacheMma*' > $RES/suite-warps8.log 2>&1; echo "warps8 rc $?" > $RES/rc-warps8 )
for t in core parallel warps8; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
llama=(--family llama --vocab 128256 --context 1024 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000)
for round in 1 2; do
  for v in "ahead0 RETORT_DECODE_AHEAD=0" "ahead1 RETORT_DECODE_AHEAD=1" "w8-ahead0 RETORT_DECODE_AHEAD=0 RETORT_DECODE_ATTENTION_WARPS=8" "w8-ahead1 RETORT_DECODE_AHEAD=1 RETORT_DECODE_ATTENTION_WARPS=8"; do
    set -- $v; label=$1; shift
    env "$@" timeout 60 $b/bench_generate "${gen[@]}" --batches 24,32 --label gpt2-$label --json $RES/gen.jsonl > $RES/gen-$label-r$round.log 2>&1 || echo "$label rc $?"
  done
  for v in "ahead0 RETORT_DECODE_AHEAD=0" "ahead1 RETORT_DECODE_AHEAD=1"; do
    set -- $v; label=$1; shift
    env "$@" timeout 100 $b/bench_generate "${gen[@]}" "${llama[@]}" --batches 32 --label llama-$label --json $RES/gen.jsonl > $RES/gen-llama-$label-r$round.log 2>&1 || echo "llama $label rc $?"
  done
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for line in open(f"{sys.argv[1]}/gen.jsonl"):
    r = json.loads(line); d[(r["label"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print("%-16s %3d  %s" % (label, batch, " / ".join("%.4f" % x for x in v)))
PY
echo "done at $(( $(date +%s) - t0 )) s"
