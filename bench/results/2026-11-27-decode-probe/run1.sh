#!/usr/bin/env bash
# What each kind of kernel costs inside GPT-2 small's batch-32 decode step (CUDA graphs): a probe build (not kept)
# whose RETORT_PROBE_SKIP=<list> skips the launches named (attn: the cache attention; addnorm / plainnorm: the
# norms; gNxK,: the cuBLASLt product of N outputs over K inputs) at 32 rows; values are wrong, time only. The
# probe is run1-probe.patch on c5c3dcc. The LM head (no bias) goes through gemm, not linear_forward: g50304x768, skips
# nothing. Runs whose garbage reached the sampler stopped on its NaN check (rc 134) and left no line.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/r1; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r1' EXIT
tar xJf gpu/p1.tar.xz -C gpu; b=$PWD/gpu/p1; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
gen=(--device cuda --dtype bf16 --batches 32 --prompt 128 --new 128 --repeats 3)
for round in 1 2; do
  for skip in none attn addnorm plainnorm g2304x768, g768x768, g3072x768, g768x3072, g50304x768, "attn,addnorm,plainnorm" "g2304x768,g768x768,g3072x768,g768x3072,g50304x768,"; do
    RETORT_PROBE_SKIP="$skip" timeout 60 $b/bench_generate "${gen[@]}" --label "$skip" --json $RES/gen.jsonl > $RES/gen-r$round.log 2>&1 || echo "$skip rc $?"
  done
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for line in open(f"{sys.argv[1]}/gen.jsonl"):
    r = json.loads(line); d[r["label"]].append(r["ms_per_step"])
base = min(d["none"])
for label, v in d.items(): print("%-60s %s  saves %.4f" % (label, " / ".join("%.4f" % x for x in v), base - min(v)))
PY
echo "done at $(( $(date +%s) - t0 )) s"
