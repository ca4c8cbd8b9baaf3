#!/usr/bin/env bash
# f3's bundle (1589f41) on whichever card comes: GPT-2 small's decode with two steps in flight and one at a time
# (RETORT_DECODE_PIPELINE=0), alternating with torch.compile (reduce-overhead) in three rounds, batches 1 and 32.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/f6; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp f6' EXIT
tar xJf gpu/f3.tar.xz -C gpu; b=$PWD/gpu/f3; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
for round in 1 2 3; do
  timeout 60 $b/bench_generate "${gen[@]}" --batches 1,32 --label in-flight --json $RES/gen.jsonl > $RES/gen-in-flight-r$round.log 2>&1 || echo "in-flight rc $?"
  RETORT_DECODE_PIPELINE=0 timeout 60 $b/bench_generate "${gen[@]}" --batches 1,32 --label one-at-a-time --json $RES/gen.jsonl > $RES/gen-one-r$round.log 2>&1 || echo "one rc $?"
  timeout 150 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch-r$round.log 2>&1 || echo "torch rc $?"
  echo "round $round at $(( $(date +%s) - t0 )) s"
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
gzip -9 $RES/*.log
echo "done at $(( $(date +%s) - t0 )) s"
