#!/usr/bin/env bash
# The non-persistent copy-engine forward with tile j + 2 issued by the trailing warpgroup (7a57bfe) against 0a5cfb1 in
# one call, three rounds; SDPA beside it; the flash tests and memcheck. Then decoding GPT-2 small with the real
# vocabulary (50,257 ids, not a multiple of 8) against 50,304: the head's product is padded every step (gemm's
# kPaddingMinMacs); bench_generate_nopad is 7a57bfe built with that padding skipped where rows or n < 256.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r2; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r2' EXIT
tar xJf gpu/q2.tar.xz -C gpu; b=$PWD/gpu/q2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 120 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/flash-tests.log 2>&1; echo "flash tests rc $?"
grep -E "^\[  (PASSED|FAILED)" $RES/flash-tests.log
SAN=/usr/local/cuda-13.0/bin/compute-sanitizer
timeout 150 $SAN --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.WarpgroupAndMmaSyncKernelsAgree' > $RES/memcheck.log 2>&1; echo "memcheck rc $?"
grep -E "ERROR SUMMARY" $RES/memcheck.log
timeout 150 $SAN --tool racecheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.LongSequence' > $RES/racecheck.log 2>&1; echo "racecheck rc $?"
grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $RES/racecheck.log
echo "at $(( $(date +%s) - t0 )) s"
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2 3; do
  timeout 120 $b/bench_attention_0a5cfb1 --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/a-0a5cfb1-r$round.jsonl > /dev/null 2>&1
  timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/b-new-r$round.jsonl > /dev/null 2>&1
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
mkdir -p $b/bench && ln -sf $b/bench_attention $b/bench/bench_attention
PATHS=flash REPEATS=5 timeout 200 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
tail -9 $RES/attention/table.md | cut -d'|' -f2-9
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --batches 1,8,32 --prompt 128 --new 128 --repeats 3)
for round in 1 2; do
  timeout 100 $b/bench_generate "${gen[@]}" --vocab 50304 --label v50304 --json $RES/gen.jsonl > $RES/gen-50304-r$round.log 2>&1
  timeout 100 $b/bench_generate "${gen[@]}" --vocab 50257 --label v50257 --json $RES/gen.jsonl > $RES/gen-50257-r$round.log 2>&1
  timeout 100 $b/bench_generate_nopad "${gen[@]}" --vocab 50257 --label v50257-nopad --json $RES/gen.jsonl > $RES/gen-nopad-r$round.log 2>&1
done
python3 - $RES <<'PY'
import json, sys
for line in open(f"{sys.argv[1]}/gen.jsonl"):
    r = json.loads(line)
    print(r.get("label"), r.get("batch"), round(r.get("decode_tokens_per_s", 0), 1), round(r.get("ms_per_step", 0), 4))
PY
echo "done at $(( $(date +%s) - t0 )) s"
