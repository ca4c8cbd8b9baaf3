#!/usr/bin/env bash
# The loss benchmark in one command: retort's fused losses on one GPU against PyTorch eager and torch.compile
# (bench/loss_bench_torch.py) on the same GPU, then the vocab-parallel variants (fused_tp, manual_tp, gather) at
# each tp the machine has GPUs for.
#   bench/run_loss_bench.sh BUILD_DIR [OUT_DIR] [TP ...]
# OUT_DIR defaults to runs/loss-bench; TP values default to 2 (and 4, 8 when the machine has that many GPUs).
# Environment: TOKENS (4096), VOCABS (32768,65536,131072), LOSSES (ce,fkl,rkl), ITERS (20), PYTHON (python3).
# OUT_DIR gets retort-tp1.jsonl, torch.jsonl, retort-tpN.jsonl, the logs and table.md (the tables printed at the end).
set -euo pipefail
build=${1:?usage: run_loss_bench.sh BUILD_DIR [OUT_DIR] [TP ...]}
out=${2:-runs/loss-bench}
shift $(($# < 2 ? $# : 2))
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
tokens=${TOKENS:-4096}
vocabs=${VOCABS:-32768,65536,131072}
losses=${LOSSES:-ce,fkl,rkl}
iters=${ITERS:-20}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
tps=("$@")
if ((${#tps[@]} == 0)); then
  for t in 2 4 8; do ((gpus >= t)) && tps+=("$t"); done
fi
common=(--tokens "$tokens" --vocab "$vocabs" --losses "$losses" --iters "$iters")

echo "== retort, one GPU"
"$build/bench/bench_loss" "${common[@]}" --json "$out/retort-tp1.jsonl" 2>&1 | tee "$out/retort-tp1.log"
echo "== torch eager and torch.compile, the same GPU"
$py "$here/loss_bench_torch.py" --tokens "$tokens" --vocab "$vocabs" --losses "$losses" --iters "$iters" \
  --json "$out/torch.jsonl" 2>&1 | tee "$out/torch.log" || echo "(torch benchmark failed: see $out/torch.log)"
for tp in "${tps[@]}"; do
  echo "== retort, vocab-parallel over $tp GPUs"
  "$build/apps/retort" launch --nproc "$tp" --exec -- "$build/bench/bench_loss" "${common[@]}" --tp "$tp" \
    --json "$out/retort-tp$tp.jsonl" 2>&1 | tee "$out/retort-tp$tp.log"
done

$py - "$out" <<'PY'
import glob, json, os, sys

out = sys.argv[1]
rows = []
for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    rows += [json.loads(l) for l in open(path) if l.strip()]
if not rows:
    sys.exit("no measurements: see the logs in " + out)

def ms(r):
    return "OOM" if r["status"] != "ok" else f"{r['time_ms']:.3f}"

lines = []
single = [r for r in rows if r["tp"] == 1]
if single:
    device = single[0]["device"]
    lines += [f"Single GPU ({device}), {single[0]['tokens']} tokens, bf16 logits, forward + backward; "
              "ratio = peer time / retort time (> 1: retort faster)", "",
              "| loss | vocab | retort variant | retort ms | eager ms | compile ms | vs eager | vs compile "
              "| retort share of copy BW | retort extra / logits | eager extra / logits | compile extra / logits |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keyed = {(r["framework"], r["variant"], r["loss"], r["vocab"]): r for r in single}
    for (fw, variant, loss, vocab), r in sorted(keyed.items(), key=lambda kv: (kv[0][2], kv[0][3], kv[0][1])):
        if fw != "retort":
            continue
        eager = keyed.get(("torch", "eager", loss, vocab))
        comp = keyed.get(("torch", "compile", loss, vocab))
        def ratio(peer):
            if not peer or peer["status"] != "ok" or r["status"] != "ok":
                return "-"
            return f"{peer['time_ms'] / r['time_ms']:.2f}x"
        def extra(x):
            return "-" if not x or x["status"] != "ok" or x.get("extra_per_logits") is None else f"{x['extra_per_logits']:.2f}"
        share = "-" if r["status"] != "ok" else f"{r['bandwidth_share']:.2f}"
        lines.append(f"| {loss} | {vocab} | {variant} | {ms(r)} | {ms(eager) if eager else '-'} | {ms(comp) if comp else '-'} "
                     f"| {ratio(eager)} | {ratio(comp)} | {share} | {extra(r)} | {extra(eager)} | {extra(comp)} |")
multi = [r for r in rows if r["tp"] > 1]
if multi:
    lines += ["", "Vocab-parallel, time = the slowest rank, per-rank memory; ratio = variant time / fused_tp time", "",
              "| loss | vocab | tp | fused_tp ms | manual_tp ms | gather ms | manual / fused | gather / fused "
              "| fused extra MiB | gather extra MiB | max grad diff |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    keyed = {(r["loss"], r["vocab"], r["tp"], r["variant"]): r for r in multi}
    for loss, vocab, tp in sorted({(r["loss"], r["vocab"], r["tp"]) for r in multi}):
        v = {name: keyed.get((loss, vocab, tp, name)) for name in ("fused_tp", "manual_tp", "gather")}
        def rel(name):
            a, b = v[name], v["fused_tp"]
            if not a or not b or a["status"] != "ok" or b["status"] != "ok":
                return "-"
            return f"{a['time_ms'] / b['time_ms']:.2f}x"
        def mib(x):
            return "-" if not x or x["status"] != "ok" or x.get("peak_extra_bytes") is None else f"{x['peak_extra_bytes'] / 2**20:.0f}"
        diffs = [x["grad_max_diff"] for x in v.values() if x and x.get("grad_max_diff") is not None]
        diff = f"{max(diffs):.1e}" if diffs else "-"
        times = " | ".join(ms(v[n]) if v[n] else "-" for n in v)
        lines.append(f"| {loss} | {vocab} | {tp} | {times} | {rel('manual_tp')} | {rel('gather')} "
                     f"| {mib(v['fused_tp'])} | {mib(v['gather'])} | {diff} |")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "table.md"), "w").write(text)
print(text)
PY
