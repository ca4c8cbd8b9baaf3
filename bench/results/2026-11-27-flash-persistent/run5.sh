#!/usr/bin/env bash
# The forward's per-tile cost a CTA an item: d0ff40c, run4's tree (bench_attention_p4) and this tree, where the kernel
# that is not persistent again loads Q on its first tile's barrier and alternates two turn barriers, and every kernel
# takes an item's key/value head once (not per tile load); two rounds, each kernel's default and
# RETORT_FLASH_FORWARD_PERSISTENT=0. The flash tests of this tree.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r5; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r5' EXIT
tar xJf gpu/p5.tar.xz -C gpu; b=$PWD/gpu/p5; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do
  timeout 120 $b/bench_attention_d0ff40c --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/a-d0ff40c-r$round.jsonl > /dev/null 2>&1
  timeout 120 $b/bench_attention_p4 --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/b-p4-r$round.jsonl > /dev/null 2>&1
  timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/c-tree-r$round.jsonl > /dev/null 2>&1
  RETORT_FLASH_FORWARD_PERSISTENT=0 timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/d-tree-persistent0-r$round.jsonl > /dev/null 2>&1
done
python3 - $RES <<'PY'
import json, sys, glob, collections
f_, b_ = collections.defaultdict(list), collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/*-r?.jsonl")):
    v = f.split("/")[-1].rsplit("-r", 1)[0]
    for line in open(f):
        r = json.loads(line)
        f_[(r["shape"], v)].append(r["forward_ms"]); b_[(r["shape"], v)].append(r["forward_backward_ms"] - r["forward_ms"])
vs = sorted({k[1] for k in f_}); shapes = list(dict.fromkeys(k[0] for k in f_))
print("forward ms, min / max of rounds: " + " | ".join(vs))
for s in shapes: print(s, "|", " | ".join("%.3f/%.3f" % (min(f_[(s, v)]), max(f_[(s, v)])) for v in vs))
print("backward ms: " + " | ".join(vs))
for s in shapes: print(s, "|", " | ".join("%.3f/%.3f" % (min(b_[(s, v)]), max(b_[(s, v)])) for v in vs))
PY
echo "at $(( $(date +%s) - t0 )) s"
timeout 200 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests.log 2>&1; echo "tests rc $?"
grep -E '^\[  (PASSED|FAILED)|Failure' $RES/tests.log | head
echo "done at $(( $(date +%s) - t0 )) s"
