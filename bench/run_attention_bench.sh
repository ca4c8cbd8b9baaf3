#!/usr/bin/env bash
# The attention benchmark in one command: retort's causal attention with grouped-query heads (bench_attention) and
# PyTorch's scaled_dot_product_attention (bench/attention_bench_torch.py: enable_gqa where PyTorch has it, and
# the key/value heads repeated) on the same device in the same run, at head size 64 and 128 (batch 4, 2048
# positions, 32 query heads, 8 key/value heads).
#   bench/run_attention_bench.sh BUILD_DIR [OUT_DIR]
# OUT_DIR defaults to runs/attention-bench and gets retort.jsonl, torch.jsonl, the logs and table.md (forward and
# forward + backward ms side by side; ratio = peer ms / retort ms, > 1: retort faster).
# Environment: DEVICE (cuda), DTYPE (bf16), SHAPES (4x2048x32x8x64,4x2048x32x8x128), REPEATS (10),
# PYTHON (python3); SMOKE=1 runs small shapes on the CPU instead (f32, 1x128x8x2x64 and 1x64x4x1x128).
set -euo pipefail
build=${1:?usage: run_attention_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-runs/attention-bench}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
if [[ ${SMOKE:-0} == 1 ]]; then
  device=${DEVICE:-cpu}; dtype=${DTYPE:-f32}; shapes=${SHAPES:-1x128x8x2x64,1x64x4x1x128}; repeats=${REPEATS:-3}
else
  device=${DEVICE:-cuda}; dtype=${DTYPE:-bf16}; shapes=${SHAPES:-4x2048x32x8x64,4x2048x32x8x128}
  repeats=${REPEATS:-10}
fi
common=(--device "$device" --dtype "$dtype" --shapes "$shapes" --repeats "$repeats")
mkdir -p "$out"
rm -f "$out/retort.jsonl" "$out/torch.jsonl"

echo "== retort"
"$build/bench/bench_attention" "${common[@]}" --json "$out/retort.jsonl" 2>&1 | tee "$out/retort.log"
echo "== torch sdpa (enable_gqa where available)"
$py "$here/attention_bench_torch.py" "${common[@]}" --json "$out/torch.jsonl" 2>&1 | tee "$out/torch.log" ||
  echo "(torch failed: see $out/torch.log)"
echo "== torch sdpa, key/value heads repeated"
$py "$here/attention_bench_torch.py" "${common[@]}" --repeat-kv --json "$out/torch.jsonl" 2>&1 |
  tee "$out/torch-repeat.log" || echo "(torch failed: see $out/torch-repeat.log)"

$py - "$out" <<'PY'
import json, os, sys

out = sys.argv[1]
rows = []
for name in ("retort.jsonl", "torch.jsonl"):
    path = os.path.join(out, name)
    if os.path.exists(path):
        rows += [json.loads(l) for l in open(path) if l.strip()]
retort = {r["shape"]: r for r in rows if r["framework"] == "retort"}
if not retort:
    sys.exit("no retort measurement: see " + os.path.join(out, "retort.log"))
first = next(iter(retort.values()))
peers = sorted({r["framework"] for r in rows if r["framework"] != "retort"})
lines = [f"Causal attention with grouped-query heads on {first['device']} ({first['dtype']}); shapes "
         "BxTxHxKVxD; ratio = peer ms / retort ms (> 1: retort faster)", "",
         "| shape | retort fwd ms | retort fwd+bwd ms | "
         + " | ".join(f"{p} fwd ms | {p} fwd+bwd ms | ratio fwd+bwd vs {p}" for p in peers) + " |",
         "|---" * (3 + 3 * len(peers)) + "|"]
for shape, r in retort.items():
    cells = [shape, f"{r['forward_ms']:.3f}", f"{r['forward_backward_ms']:.3f}"]
    for p in peers:
        peer = next((x for x in rows if x["framework"] == p and x["shape"] == shape), None)
        cells += ["-", "-", "-"] if peer is None else [
            f"{peer['forward_ms']:.3f}", f"{peer['forward_backward_ms']:.3f}",
            f"{peer['forward_backward_ms'] / r['forward_backward_ms']:.2f}x"]
    lines.append("| " + " | ".join(cells) + " |")
table = "\n".join(lines) + "\n"
open(os.path.join(out, "table.md"), "w").write(table)
print("\n" + table)
PY
