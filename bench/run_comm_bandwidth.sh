#!/usr/bin/env bash
# All-reduce and all-gather bus bandwidth: retort (bench_comm_bandwidth, one process per rank under
# `retort launch`) against torch.distributed (bench/comm_bandwidth_torch.py, spawned), same sizes, dtype and
# nccl-tests definitions, one after the other in one command.
#   bench/run_comm_bandwidth.sh BUILD_DIR [NPROC] [OUT_DIR] [options for both benchmarks]
# NPROC defaults to 2, OUT_DIR to runs/comm-bandwidth. Options after OUT_DIR go to both benchmarks, e.g.
# --dtype bf16, --max-bytes 64M, --iters 50 --warmup 10, --backend gloo (CPU; the default is nccl).
# OUT_DIR gets retort.jsonl, torch.jsonl, both logs, and table.md (the markdown table printed at the end).
set -euo pipefail
build=${1:?usage: run_comm_bandwidth.sh BUILD_DIR [NPROC] [OUT_DIR] [options for both benchmarks]}
nproc=${2:-2}
out=${3:-runs/comm-bandwidth}
shift $(($# < 3 ? $# : 3))
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"

# NVLink multicast (NVLS) stays off on both sides: the GPU machines require it, and the comparison is like for like.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# The two programs default the backend differently in a CPU build: name it for both unless the options do.
args=("$@")
backend_given=0
for a in "${args[@]}"; do [[ $a == --backend || $a == --backend=* ]] && backend_given=1; done
((backend_given)) || args=(--backend nccl "${args[@]}")

echo "== retort: $build/bench/bench_comm_bandwidth, $nproc ranks ${args[*]}"
"$build/apps/retort" launch --nproc "$nproc" --exec -- \
  "$build/bench/bench_comm_bandwidth" --json "$out/retort.jsonl" "${args[@]}" 2>&1 | tee "$out/retort.log"
echo "== torch.distributed: $nproc ranks ${args[*]}"
$py "$here/comm_bandwidth_torch.py" --nproc "$nproc" --json "$out/torch.jsonl" "${args[@]}" 2>&1 |
  tee "$out/torch.log"

$py - "$out/retort.jsonl" "$out/torch.jsonl" "$out/table.md" <<'PY'
import json, sys

def load(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return {(r["collective"], r["size"]): r for r in rows}, rows

retort, rows_r = load(sys.argv[1])
torch, rows_t = load(sys.argv[2])
if not rows_r or not rows_t:
    sys.exit("no measurements: see the logs beside the JSON files")

def bw(x):
    return "-" if x is None else f"{x:.1f}" if x >= 100 else f"{x:.2f}" if x >= 1 else f"{x:.3f}"

def label(n):
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}iB"
    return f"{n} B"

r0, t0 = rows_r[0], rows_t[0]
lines = [
    f"{r0['backend']} on {r0['nranks']} x {r0['device']}, {r0['dtype']}, {r0['iters']} timed iterations after "
    f"{r0['warmup']} warm-up; retort NCCL {r0['nccl_version'] or '-'}, torch {t0['torch_version']} NCCL "
    f"{t0['nccl_version'] or '-'}. busBw in GB/s (nccl-tests definitions; all-gather size = gathered output); "
    "ratio = retort / torch.",
    "",
    "| size | retort all-reduce busBw | torch all-reduce busBw | ratio | retort all-gather busBw | torch all-gather busBw | ratio |",
    "|---:|---:|---:|---:|---:|---:|---:|",
]
for size in sorted({s for _, s in retort} | {s for _, s in torch}):
    cells = [label(size)]
    for collective in ("all_reduce", "all_gather"):
        a = retort.get((collective, size), {}).get("bus_bw_gbps")
        b = torch.get((collective, size), {}).get("bus_bw_gbps")
        cells += [bw(a), bw(b), f"{a / b:.2f}" if a and b else "-"]
    lines.append("| " + " | ".join(cells) + " |")
text = "\n".join(lines)
print("\n" + text)
open(sys.argv[3], "w").write(text + "\n")
PY
