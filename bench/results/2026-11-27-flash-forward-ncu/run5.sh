#!/usr/bin/env bash
# The forward's grid in chunks of about a wave's (batch, key/value head) pairs (the new default) against one chunk of
# every pair (RETORT_FLASH_GRID=longest-first, the previous default) in one binary, three rounds; Nsight Compute's
# DRAM bytes and time of both forwards at 4 x 4096 x 32 x 8 x 128; the flash tests and memcheck; SDPA beside it.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r5; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r5' EXIT
tar xJf gpu/q5.tar.xz -C gpu; b=$PWD/gpu/q5; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 120 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/flash-tests.log 2>&1; echo "flash tests rc $?"
grep -E "^\[  (PASSED|FAILED)" $RES/flash-tests.log
SAN=/usr/local/cuda-13.0/bin/compute-sanitizer
timeout 150 $SAN --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.WarpgroupAndMmaSyncKernelsAgree' > $RES/memcheck.log 2>&1; echo "memcheck rc $?"
grep -E "ERROR SUMMARY" $RES/memcheck.log
echo "at $(( $(date +%s) - t0 )) s"
NCU=/usr/local/cuda-13.0/bin/ncu
for g in chunks longest-first; do
  env RETORT_FLASH_GRID=$g timeout 100 $NCU --csv --kernel-name regex:wgmma_forward --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct $b/bench_attention --device cuda --dtype bf16 --shapes 4x4096x32x8x128,8x2048x32x8x128,4x4096x32x8x64 --repeats 1 --paths flash > $RES/ncu-$g.csv 2> $RES/ncu-$g.err
  echo "== $g"; python3 - $RES/ncu-$g.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 14 and r[0].isdigit()]
for r in rows: print(r[0], r[4][:60], r[-3], r[-1])
PY
done
echo "at $(( $(date +%s) - t0 )) s"
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2 3; do
  for g in chunks longest-first; do
    env RETORT_FLASH_GRID=$g timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/$g-r$round.jsonl > /dev/null 2>&1
  done
done
python3 - $RES <<'PY'
import json, sys, glob, collections
f_ = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/*-r?.jsonl")):
    v = f.split("/")[-1].rsplit("-r", 1)[0]
    for line in open(f):
        r = json.loads(line); f_[(r["shape"], v)].append(r["forward_ms"])
vs = sorted({k[1] for k in f_}); shapes = list(dict.fromkeys(k[0] for k in f_))
print("forward ms, min / max of rounds: " + " | ".join(vs))
for s in shapes: print(s, "|", " | ".join("%.3f/%.3f" % (min(f_[(s, v)]), max(f_[(s, v)])) for v in vs))
PY
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
PATHS=flash REPEATS=5 timeout 200 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
tail -9 $RES/attention/table.md | cut -d'|' -f2-9
echo "done at $(( $(date +%s) - t0 )) s"
