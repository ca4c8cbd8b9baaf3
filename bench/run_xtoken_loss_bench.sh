#!/usr/bin/env bash
# The cross-tokenizer loss benchmark in one command: retort's chunk-averaged KL and gold loss (bench_xtoken_loss)
# against their PyTorch twin (bench/xtoken_loss_bench_torch.py) on the same device, forward + backward.
#   bench/run_xtoken_loss_bench.sh BUILD_DIR [OUT_DIR]
# OUT_DIR defaults to runs/xtoken-loss-bench. Environment: DEVICE (cuda), POSITIONS (4096), STUDENT_VOCAB (128256),
# TEACHER_VOCAB (151936), TOPK (32), GOLD_TOP (8192), LOSSES (chunk_kl,gold), REPEATS (10), PYTHON (python3).
# A quick run on the CPU: DEVICE=cpu POSITIONS=256 STUDENT_VOCAB=4096 TEACHER_VOCAB=5000 GOLD_TOP=256 bench/run_...
# OUT_DIR gets retort.jsonl, torch.jsonl, the logs and table.md (printed at the end). The two programs draw their
# own random problems of the same statistics, so their loss values agree only roughly.
set -euo pipefail
build=${1:?usage: run_xtoken_loss_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-runs/xtoken-loss-bench}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
args=(--device "${DEVICE:-cuda}" --positions "${POSITIONS:-4096}" --student-vocab "${STUDENT_VOCAB:-128256}"
  --teacher-vocab "${TEACHER_VOCAB:-151936}" --topk "${TOPK:-32}" --gold-top "${GOLD_TOP:-8192}"
  --losses "${LOSSES:-chunk_kl,gold}" --repeats "${REPEATS:-10}")
mkdir -p "$out"
rm -f "$out/retort.jsonl" "$out/torch.jsonl"

echo "== retort"
"$build/bench/bench_xtoken_loss" "${args[@]}" --json "$out/retort.jsonl" 2>&1 | tee "$out/retort.log" ||
  echo "(retort benchmark failed: see $out/retort.log)"
echo "== PyTorch"
$py "$here/xtoken_loss_bench_torch.py" "${args[@]}" --json "$out/torch.jsonl" 2>&1 | tee "$out/torch.log" ||
  echo "(torch benchmark failed: see $out/torch.log)"

$py - "$out" <<'PY'
import json, os, sys

out = sys.argv[1]
rows = {}
for fw in ("retort", "torch"):
    path = os.path.join(out, fw + ".jsonl")
    if os.path.exists(path):
        for line in open(path):
            if line.strip():
                r = json.loads(line)
                rows[(fw, r["loss"])] = r
if not rows:
    sys.exit("no measurements: see the logs in " + out)
any_row = next(iter(rows.values()))
def ms(r):
    return "-" if not r or r.get("time_ms") is None else f"{r['time_ms']:.2f}"
def mib(r):
    b = r.get("peak_extra_bytes") if r else None
    return "-" if b is None or b < 0 else f"{b / 2**20:.0f}"
lines = [f"Cross-tokenizer losses, forward + backward, {any_row['positions']} student positions "
         f"({any_row['chunks']} chunks), V_s {any_row['student_vocab']}, V_t {any_row['teacher_vocab']}, "
         f"K {any_row['topk']}, gold m {any_row['gold_top']}, {any_row['dtype']} logits, on {any_row['device']}; "
         "ratio = PyTorch time / retort time (> 1: retort faster)", "",
         "| loss | retort ms | PyTorch ms | ratio | retort extra MiB | PyTorch extra MiB | retort loss | PyTorch loss |",
         "|---|---|---|---|---|---|---|---|"]
for loss in ("chunk_kl", "gold"):
    r, t = rows.get(("retort", loss)), rows.get(("torch", loss))
    if not r and not t:
        continue
    ratio = "-"
    if r and t and r.get("time_ms") and t.get("time_ms"):
        ratio = f"{t['time_ms'] / r['time_ms']:.2f}x"
    lines.append(f"| {loss} | {ms(r)} | {ms(t)} | {ratio} | {mib(r)} | {mib(t)} | "
                 f"{r['loss_value'] if r else '-'} | {t['loss_value'] if t else '-'} |")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "table.md"), "w").write(text)
print(text)
PY
