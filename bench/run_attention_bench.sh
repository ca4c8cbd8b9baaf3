#!/usr/bin/env bash
# The attention benchmark in one command: retort's causal attention with grouped-query heads (bench_attention,
# through the fused path and the materialising one) and PyTorch's scaled_dot_product_attention
# (bench/attention_bench_torch.py: enable_gqa where PyTorch has it, and the key/value heads repeated) on the same
# device in the same run. Default shapes: 16384 tokens a call (batch 16384 / T) at T = 1024, 2048, 4096, Llama-like
# heads (32 query, 8 key/value) at head size 128 and 64, GPT-2-like heads (12, 12) at head size 64.
#   bench/run_attention_bench.sh BUILD_DIR [OUT_DIR]
# OUT_DIR defaults to runs/attention-bench and gets retort.jsonl, torch.jsonl, the logs and table.md (forward and
# forward + backward ms and TFLOP/s side by side; ratio = peer ms / retort ms, > 1: retort faster; FLOP rates under
# the causal convention of bench/attention_bench.cpp).
# Environment: DEVICE (cuda), DTYPE (bf16), SHAPES (the 9 above), PATHS (flash,materialized), REPEATS (10),
# PYTHON (python3); SMOKE=1 runs small shapes on the CPU instead (f32, 1x128x8x2x64 and 1x64x4x1x128).
set -euo pipefail
build=${1:?usage: run_attention_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-runs/attention-bench}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
if [[ ${SMOKE:-0} == 1 ]]; then
  device=${DEVICE:-cpu}; dtype=${DTYPE:-f32}; shapes=${SHAPES:-1x128x8x2x64,1x64x4x1x128}; repeats=${REPEATS:-3}
else
  default_shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64
  default_shapes+=,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
  device=${DEVICE:-cuda}; dtype=${DTYPE:-bf16}; shapes=${SHAPES:-$default_shapes}
  repeats=${REPEATS:-10}
fi
common=(--device "$device" --dtype "$dtype" --shapes "$shapes" --repeats "$repeats")
mkdir -p "$out"
rm -f "$out/retort.jsonl" "$out/torch.jsonl"

echo "== retort"
"$build/bench/bench_attention" "${common[@]}" --paths "${PATHS:-flash,materialized}" --json "$out/retort.jsonl" 2>&1 | tee "$out/retort.log"
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
mine = sorted({r["framework"] for r in rows if r["framework"].startswith("retort")})
if not mine:
    sys.exit("no retort measurement: see " + os.path.join(out, "retort.log"))
main = "retort-flash" if "retort-flash" in mine else mine[0]
first = next(r for r in rows if r["framework"] == main)
peers = [f for f in mine if f != main] + sorted({r["framework"] for r in rows if not r["framework"].startswith("retort")})


def tflops(r):
    # The causal convention of bench_attention (rows written before it carried no rate).
    return r.get("forward_backward_tflops", 3.5 * 2.0 * r["batch"] * r["heads"] * r["T"] ** 2 * r["head_dim"]
                 / (r["forward_backward_ms"] * 1e-3) / 1e12)


lines = [f"Causal attention with grouped-query heads on {first['device']} ({first['dtype']}); shapes "
         f"BxTxHxKVxD; {main} against each peer; ratio = peer fwd+bwd ms / {main} fwd+bwd ms (> 1: {main} faster); "
         "TFLOP/s causal (forward 2 B H T^2 D, forward + backward 3.5 times that)", "",
         f"| shape | {main} fwd ms | {main} fwd+bwd ms | {main} fwd+bwd TFLOP/s |"
         + "".join(f" {p} fwd ms | {p} fwd+bwd ms | {p} TFLOP/s | ratio vs {p} |" for p in peers),
         "|---" * (4 + 4 * len(peers)) + "|"]
for r in (x for x in rows if x["framework"] == main):
    shape = r["shape"]
    cells = [shape, f"{r['forward_ms']:.3f}", f"{r['forward_backward_ms']:.3f}", f"{tflops(r):.0f}"]
    for p in peers:
        peer = next((x for x in rows if x["framework"] == p and x["shape"] == shape), None)
        cells += ["-"] * 4 if peer is None else [
            f"{peer['forward_ms']:.3f}", f"{peer['forward_backward_ms']:.3f}", f"{tflops(peer):.0f}",
            f"{peer['forward_backward_ms'] / r['forward_backward_ms']:.2f}x"]
    lines.append("| " + " | ".join(cells) + " |")
table = "\n".join(lines) + "\n"
open(os.path.join(out, "table.md"), "w").write(table)
print("\n" + table)
PY
