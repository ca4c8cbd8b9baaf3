#!/usr/bin/env bash
# Decoding GPT-2 small with its real vocabulary (50,257 ids) against the benchmark's 50,304: this build (the head's
# rows padded once, ops::PaddedRowsCache) against 7a57bfe (a padded copy of the head every step) in one call, two
# rounds; torch.compile (reduce-overhead, static cache) at both vocabularies at batch 32; the GPU tests.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r3; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r3' EXIT
tar xJf gpu/q3.tar.xz -C gpu; b=$PWD/gpu/q3; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
( timeout 240 $b/retort_parallel_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-parallel.log 2>&1; echo "parallel rc $?" > $RES/rc-parallel ) &
( timeout 240 $b/retort_core_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:PaddedRowsCache.*:FoldedNormCache.*' > $RES/suite-core.log 2>&1; echo "core rc $?" > $RES/rc-core ) &
wait
for t in core parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
grep -E "GpuVocabularyNotAMultipleOfEight|PaddedRowsCache" $RES/suite-*.log | grep -E "OK|FAILED"
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --batches 1,8,16,32 --prompt 128 --new 128 --repeats 3)
for round in 1 2; do
  for v in 50304 50257; do
    timeout 100 $b/bench_generate "${gen[@]}" --vocab $v --label v$v --json $RES/gen.jsonl > $RES/gen-$v-r$round.log 2>&1
    timeout 100 $b/bench_generate_7a57bfe "${gen[@]}" --vocab $v --label v$v-7a57bfe --json $RES/gen.jsonl > $RES/gen-$v-7a57bfe-r$round.log 2>&1
  done
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for line in open(f"{sys.argv[1]}/gen.jsonl"):
    r = json.loads(line); d[(r["label"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print(label, batch, " / ".join("%.4f" % x for x in v))
PY
echo "at $(( $(date +%s) - t0 )) s"
for v in 50304 50257; do
  timeout 400 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 32 --prompt 128 --new 128 --repeats 3 --vocab $v --label v$v --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch-$v.log 2>&1; echo "torch $v rc $?"
  echo "at $(( $(date +%s) - t0 )) s"
done
python3 - $RES <<'PY'
import json, sys
for line in open(f"{sys.argv[1]}/torch.jsonl"):
    r = json.loads(line); print(r["framework"], r["label"], r["batch"], round(r["decode_tokens_per_s"], 1), round(r.get("ms_per_step", 0), 4))
PY
echo "done at $(( $(date +%s) - t0 )) s"
