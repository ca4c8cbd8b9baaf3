#!/usr/bin/env bash
# d0ff40c (the session's start) against this tree: the persistent forward with the rounds reversed every other one
# (default) and a CTA an item (RETORT_FLASH_FORWARD_PERSISTENT=0), and the dQ finishing kernel read in the
# accumulator's order; two rounds, forward and backward; SDPA beside the default; the flash tests and memcheck;
# Nsight Compute's kernel times of one forward + backward at 16 x 1024 x 32 x 8 x 128 and x 64.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r2; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r2' EXIT
tar xJf gpu/p2.tar.xz -C gpu; b=$PWD/gpu/p2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do
  timeout 120 $b/bench_attention_d0ff40c --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/a-d0ff40c-r$round.jsonl > /dev/null 2>&1
  for v in 1 0; do
    env RETORT_FLASH_FORWARD_PERSISTENT=$v timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/b-persistent$v-r$round.jsonl > /dev/null 2>&1
  done
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
print("ms, min / max of rounds: forward " + " | ".join(vs) + " ; backward " + " | ".join(vs))
for s in shapes: print(s, "|", " | ".join("%.3f/%.3f" % (min(f_[(s, v)]), max(f_[(s, v)])) for v in vs), "|", " | ".join("%.3f/%.3f" % (min(b_[(s, v)]), max(b_[(s, v)])) for v in vs))
PY
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
tail -9 $RES/attention/table.md | cut -d'|' -f2-9
echo "at $(( $(date +%s) - t0 )) s"
timeout 200 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*:Ops/OpCudaVsCpu.*/causal*' > $RES/tests.log 2>&1; echo "tests rc $?"
grep -E '^\[  (PASSED|FAILED)|Failure' $RES/tests.log | head
timeout 200 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.WarpgroupAndMmaSyncKernelsAgree' > $RES/memcheck.log 2>&1; echo "memcheck rc $?"
grep -E 'ERROR SUMMARY|PASSED|FAILED' $RES/memcheck.log | head -5
echo "at $(( $(date +%s) - t0 )) s"
NCU=/usr/local/cuda-13.0/bin/ncu; [[ -x $NCU ]] || NCU=$(command -v ncu)
for s in 16x1024x32x8x128 16x1024x32x8x64; do
  timeout 100 $NCU --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $b/bench_attention --device cuda --dtype bf16 --shapes $s --repeats 1 --paths flash > $RES/ncu-retort-$s.csv 2> $RES/ncu-retort-$s.err
done
python3 - $RES <<'PY'
import csv, sys, glob, collections, io
for f in sorted(glob.glob(sys.argv[1] + "/ncu-*.csv")):
    text = open(f).read(); i = text.find('"ID"')
    if i < 0: print(f, "no rows"); continue
    t, n = collections.defaultdict(float), collections.Counter()
    for r in csv.DictReader(io.StringIO(text[i:])):
        if r.get("Metric Name") != "gpu__time_duration.sum": continue
        k = r["Kernel Name"][:90]; v = float(r["Metric Value"].replace(",", ""))
        t[k] += v / (1000 if r["Metric Unit"] == "ns" else 1); n[k] += 1
    print("==", f.split("/")[-1])
    for k, v in sorted(t.items(), key=lambda x: -x[1])[:12]: print("  %9.1f us x%d  %s" % (v, n[k], k))
PY
echo "done at $(( $(date +%s) - t0 )) s"
