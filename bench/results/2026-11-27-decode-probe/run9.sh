#!/usr/bin/env bash
# The decode attention's start: a probe build (run9-probe.patch on 92cdd91; not kept) whose RETORT_PROBE_ATTENTION=1
# appends the new keys and values after the block's tiles instead of before them (warp 0 no longer waits for that
# copy before its first tile), =2 also drops the L2 prefetch before the wait (and with it the read of the row's start
# position that sized it). The tensor-core attention tests under each, then GPT-2 small at 24 and 32, three rounds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
RES=/tmp/r9; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r9' EXIT
tar xJf gpu/q8.tar.xz -C gpu; b=$PWD/gpu/q8; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in 0 1 2; do
  RETORT_PROBE_ATTENTION=$v timeout 120 $b/retort_core_tests --gtest_filter='AttentionWithCache*' > $RES/suite-$v.log 2>&1
  echo "variant $v tests rc $?: $(grep -c '^\[       OK' $RES/suite-$v.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$v.log) skipped"
done
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3 --batches 24,32)
for round in 1 2 3; do
  for v in 0 1 2; do
    RETORT_PROBE_ATTENTION=$v timeout 60 $b/bench_generate "${gen[@]}" --label v$v --json $RES/gen.jsonl > $RES/gen-v$v-r$round.log 2>&1 || echo "v$v rc $?"
  done
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for line in open(f"{sys.argv[1]}/gen.jsonl"):
    r = json.loads(line); d[(r["label"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print("%-4s %3d  %s" % (label, batch, " / ".join("%.4f" % x for x in v)))
PY
