#!/usr/bin/env bash
# dQ's additions at both head sizes, the walk from the end: bulk a warpgroup (the default at 128), bulk a warp
# (new), 4-float atomics (the default at 64); two rounds; the flash tests and compute-sanitizer; SDPA beside the
# warp-bulk build.
cd "$(dirname "$0")/../../.."
RES=/tmp/r3; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r3' EXIT
tar xJf gpu/w3.tar.xz -C gpu; b=$PWD/gpu/w3; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests.log 2>&1
echo "tests rc $?: $(grep -c '^\[       OK' $RES/tests.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests.log | head -12
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do for dq in bulk warp-bulk atomics; do
  env RETORT_FLASH_BACKWARD_DQ=$dq timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/$dq-r$round.jsonl > /dev/null 2>&1
done; done
python3 - $RES <<'PY'
import json, sys, glob, collections
t = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/*-r?.jsonl")):
    v = f.split("/")[-1].rsplit("-r", 1)[0]
    for line in open(f):
        r = json.loads(line)
        t[(r["shape"], v)].append(r["forward_backward_ms"] - r["forward_ms"])
vs = sorted({k[1] for k in t}); shapes = list(dict.fromkeys(k[0] for k in t))
print("backward ms (min / max of rounds)"); print("shape | " + " | ".join(vs))
for s in shapes: print(s, "|", " | ".join("%.3f/%.3f" % (min(t[(s, v)]), max(t[(s, v)])) for v in vs))
PY
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
RETORT_FLASH_BACKWARD_DQ=warp-bulk PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
tail -9 $RES/attention/table.md | cut -d'|' -f2-9
timeout 240 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.WarpgroupAndMmaSyncKernelsAgree' > $RES/memcheck.log 2>&1; echo "memcheck rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck.log | head -3
