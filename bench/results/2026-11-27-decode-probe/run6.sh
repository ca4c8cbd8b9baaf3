#!/usr/bin/env bash
# The decode attention's occupancy: a probe build (run6-probe.patch on 96ab5c6; not kept) whose RETORT_PROBE_ATTENTION
# picks the tensor-core kernel's variant: 0 as now (next tile in flight, 148 registers, 3 blocks a multiprocessor),
# 1 the same held to 128 registers (4 blocks, 84 bytes spilled), 2 without the next tile in flight (122 registers,
# 4 blocks), 3 that held to 96 (5 blocks, 28 bytes spilled). Its tests under each, then GPT-2 small at 24 and 32.
set -uo pipefail
cd "$(dirname "$0")/../../.."
RES=/tmp/r6; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r6' EXIT
tar xJf gpu/q5.tar.xz -C gpu; b=$PWD/gpu/q5; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in 0 1 2 3; do
  RETORT_PROBE_ATTENTION=$v timeout 120 $b/retort_core_tests --gtest_filter='AttentionWithCacheMma*' > $RES/suite-$v.log 2>&1
  echo "variant $v tests rc $?: $(grep -c '^\[       OK' $RES/suite-$v.log) ok"
done
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3 --batches 24,32)
for round in 1 2; do
  for v in 0 1 2 3; do
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
