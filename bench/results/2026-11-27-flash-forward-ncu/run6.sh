#!/usr/bin/env bash
# The final tree (83b3a2d: the backward's preparation in one pass, the forward grid in chunks at head size 128, the
# decode head padded once): the forward at the nine shapes with both grids, SDPA beside it, the flash tests under
# memcheck, the GPU suites, the toy GPT, GPT-2 small training beside torch.compile.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r6; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints --exclude="*.model" -C /tmp r6' EXIT
tar xJf gpu/q6.tar.xz -C gpu; b=$PWD/gpu/q6; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
mkdir -p /usr/share/games && tar xJf gpu/fortunes.tar.xz -C /usr/share/games
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do
  env RETORT_FLASH_GRID=longest-first timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/a-longest-first-r$round.jsonl > /dev/null 2>&1
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
SAN=/usr/local/cuda-13.0/bin/compute-sanitizer
timeout 150 $SAN --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.*' > $RES/memcheck.log 2>&1; echo "memcheck rc $?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $RES/memcheck.log | head -5
echo "at $(( $(date +%s) - t0 )) s"
( timeout 240 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 240 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
echo "at $(( $(date +%s) - t0 )) s"
timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy > $RES/toy.log 2>&1; echo "toy rc $?"
grep -hE "step 1000: validation loss|train done" $RES/toy.log
echo "at $(( $(date +%s) - t0 )) s"
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10 --batch 16)
timeout 60 $b/bench_train_throughput --label gpt2-b16 "${g[@]}" >> $RES/train.jsonl 2> $RES/train.err; echo "retort rc $?"
timeout 60 $b/bench_train_throughput --label gpt2-b16-graphs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs.err; echo "graphs rc $?"
timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b16-compile --attention sdpa --compile "${g[@]}" >> $RES/train.jsonl 2> $RES/torch.err; echo "compile rc $?"
python3 - $RES <<'PY'
import json, sys
for line in open(f"{sys.argv[1]}/train.jsonl"):
    line = line.strip()
    if not line.startswith("{"): continue
    r = json.loads(line)
    if "tokens_per_s" in r:
        print(r.get("label"), r.get("framework"), round(r["tokens_per_s"]), round(r["ms_per_step"], 2), round(r.get("peak_memory_gib", 0), 2))
PY
echo "done at $(( $(date +%s) - t0 )) s"
