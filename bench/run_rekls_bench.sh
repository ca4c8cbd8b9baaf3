#!/usr/bin/env bash
# TP-REKLS optimizer step: retort (bench_rekls, one process per rank under `retort launch`) against the anchor
# algorithm in PyTorch (bench/rekls_anchor_torch.py, spawned), same parameters, weights and gradients, one after
# the other; then a table (step time, eigh per step, optimizer state per rank) and the update check (both
# implementations' W - W0 after --check-steps steps, sampled, must agree within 2% of the largest update).
#   bench/run_rekls_bench.sh BUILD_DIR [NPROC] [OUT_DIR] [options for both benchmarks]
# NPROC (the tp size) defaults to 1, OUT_DIR to runs/rekls-bench. Options go to both, e.g. --device cpu (small
# default shapes), --params 4096x1024:0*4,1024x4096:1*4, --steps 10. Exit status 1 when the updates disagree.
set -euo pipefail
build=${1:?usage: run_rekls_bench.sh BUILD_DIR [NPROC] [OUT_DIR] [options for both benchmarks]}
nproc=${2:-1}
out=${3:-runs/rekls-bench}
shift $(($# < 3 ? $# : 3))
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
rm -f "$out/retort.jsonl" "$out/anchor.jsonl"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

echo "== retort TP-REKLS: $nproc ranks $*"
"$build/apps/retort" launch --nproc "$nproc" --exec -- \
  "$build/bench/bench_rekls" --json "$out/retort.jsonl" "$@" 2>&1 | tee "$out/retort.log"
echo "== anchor TP-REKLS (PyTorch): $nproc ranks $*"
$py "$here/rekls_anchor_torch.py" --nproc "$nproc" --json "$out/anchor.jsonl" "$@" 2>&1 | tee "$out/anchor.log"

$py - "$out/retort.jsonl" "$out/anchor.jsonl" "$out/table.md" <<'PY'
import json, sys

def last(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    if not rows:
        sys.exit(f"no measurement in {path}: see the log beside it")
    return rows[-1]

r, a = last(sys.argv[1]), last(sys.argv[2])
worst = 0.0
for name, rc in r["check"].items():
    ac = a["check"][name]
    scale = max(rc["max_abs_update"], ac["max_abs_update"], 1e-30)
    diff = max(abs(x - y) for x, y in zip(rc["samples"], ac["samples"]))
    worst = max(worst, diff / scale)
mib = lambda b: f"{b / 2**20:.1f}"
lines = [
    f"TP-REKLS optimizer step on {r['tp']} x {r['device']}, parameters {r['params']}, mean of {r['steps']} steps "
    f"after warm-up; anchor = optimizer.md's TpRekls in PyTorch {a.get('torch_version', '?')} (TF32 off).",
    "",
    "| implementation | step (ms) | best (ms) | eigh per step (group) | optimizer state per rank (MiB) |",
    "|---|---:|---:|---:|---:|",
    f"| retort TP-REKLS | {r['step_ms']:.2f} | {r['best_step_ms']:.2f} | {r['eigh_per_step']} | "
    f"{mib(r['state_bytes_per_rank'])} |",
    f"| anchor | {a['step_ms']:.2f} | {a['best_step_ms']:.2f} | {a['eigh_per_step']} | "
    f"{mib(a['state_bytes_per_rank'])} |",
    "",
    f"speed-up (anchor / retort step time): {a['step_ms'] / r['step_ms']:.2f}x. Update check after "
    f"{r['check_steps']} steps: largest sampled difference = {100 * worst:.3f}% of the largest update "
    f"({'PASS' if worst < 0.02 else 'FAIL'}, limit 2%).",
]
text = "\n".join(lines)
print("\n" + text)
open(sys.argv[3], "w").write(text + "\n")
sys.exit(0 if worst < 0.02 else 1)
PY
