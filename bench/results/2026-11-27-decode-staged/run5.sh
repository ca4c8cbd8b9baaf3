#!/usr/bin/env bash
# The final device code (fd10ef7's bundle, s3) against torch.compile measured in three separate processes in the same
# call (the peer's step moves between processes more than retort's), GPT-2 small, batches 1 and 32 (and 64); and the
# partial-sum path against the fused per-op step at 12 and 16 rows (RETORT_DECODE_LAYERS=0 RETORT_DECODE_FUSED_MAX_ROWS=8).
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/s5; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp s5' EXIT
tar xJf gpu/s3.tar.xz -C gpu; b=$PWD/gpu/s3; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
for round in 1 2 3; do
  timeout 100 $b/bench_generate "${gen[@]}" --batches 1,32,64 --label retort --json $RES/gen.jsonl > $RES/gen-r$round.log 2>&1 || echo "retort rc $?"
  timeout 200 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32,64 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch-r$round.log 2>&1 || echo "torch rc $?"
  echo "round $round at $(( $(date +%s) - t0 )) s"
done
for round in 1 2; do
  RETORT_DECODE_LAYERS=0 RETORT_DECODE_FUSED_MAX_ROWS=8 timeout 60 $b/bench_generate "${gen[@]}" --batches 12,16 --label partials-at-12-16 --json $RES/gen.jsonl > $RES/gen-partials-small-r$round.log 2>&1 || echo "partials small rc $?"
  timeout 60 $b/bench_generate "${gen[@]}" --batches 12,16 --label default-at-12-16 --json $RES/gen.jsonl > $RES/gen-default-small-r$round.log 2>&1 || echo "default small rc $?"
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for f in ("gen.jsonl", "torch.jsonl"):
    for line in open(f"{sys.argv[1]}/{f}"):
        r = json.loads(line)
        if "batch" not in r: continue
        d[(r["label"] if f == "gen.jsonl" else r["framework"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print("%-32s %3d  %s" % (label, batch, " / ".join("%.4f" % x for x in v)))
PY
echo "done at $(( $(date +%s) - t0 )) s"
