#!/usr/bin/env bash
# Call K: the norms' forward launched as a programmatic dependent (104f792). The GPU tests of every binary that runs
# norms (core, parallel, distill: graphed training steps among them) with it on and off (RETORT_DECODE_PDL=0); GPT-2
# small's decode at batches 16 and 32 against 4e3b936's binary (bench_generate_4e3b936) in the same call; GPT-2
# small's training at batch 16 x 1024 with it on and off, eager and graphed.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r67; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints -C /tmp r67' EXIT
tar xJf gpu/da8.tar.xz -C gpu; b=$PWD/gpu/da8; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for pdl in 1 0; do
  for t in core distill parallel; do
    ( RETORT_DECODE_PDL=$pdl timeout 300 $b/tests/retort_${t}_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:SmallMLinear.*:DecodeFused.*:DecodeStep.*' > $RES/suite-$t-pdl$pdl.log 2>&1; echo "$t pdl $pdl rc $?" > $RES/rc-$t-$pdl ) &
  done
  wait
  for t in core distill parallel; do
    echo "$(cat $RES/rc-$t-$pdl): $(grep -c '^\[       OK' $RES/suite-$t-pdl$pdl.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t-pdl$pdl.log) skipped"
    grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t-pdl$pdl.log | sort -u | head -5
  done
done
echo "tests done at $(( $(date +%s) - t0 )) s"
for round in 1 2; do
  for bin in bench_generate bench_generate_4e3b936; do
    timeout 100 $b/bench/$bin --batches 16,32 --prompt 128 --new 128 --repeats 3 --label $bin --json $RES/decode.jsonl > $RES/decode-$bin-$round.log 2>&1; echo "$bin round $round rc $?"
  done
done
python3 -c "
import json
for r in map(json.loads, open('$RES/decode.jsonl')): print(r['label'], r['commit'], r['batch'], round(r['ms_per_step'],4))"
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10)
for round in 1 2; do
  for pdl in 1 0; do
    RETORT_DECODE_PDL=$pdl timeout 90 $b/bench/bench_train_throughput --label gpt2-b16-pdl$pdl --batch 16 "${g[@]}" >> $RES/train.jsonl 2> $RES/train-pdl$pdl.err; echo "train pdl $pdl rc $?"
    RETORT_DECODE_PDL=$pdl timeout 90 $b/bench/bench_train_throughput --label gpt2-b16-graphs-pdl$pdl --batch 16 --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs-pdl$pdl.err; echo "train graphs pdl $pdl rc $?"
  done
done
grep '^{' $RES/train.jsonl | python3 -c "
import json, sys
for r in map(json.loads, sys.stdin): print(r.get('label'), {k: v for k, v in r.items() if 'token' in k or 'peak' in k})"
echo "done at $(( $(date +%s) - t0 )) s"
