#!/usr/bin/env bash
# Runs the GPU validation on a machine with GPUs, from a bundle built elsewhere (see docs/gpu-validation.md):
#   scripts/gpu_validate.sh BUNDLE_DIR OUT_DIR [STEPS]
# BUNDLE_DIR holds retort, tests/, bench/, devlibs/ (from shared/tools/device-bundle) and fortunes/ (the corpus).
# With two or more GPUs it also trains at tp = 2 over NCCL and compares the loss curve with tp = 1, and runs the
# NCCL bandwidth benchmark against torch.distributed.
set -uo pipefail
bundle=$(realpath "${1:?bundle dir}"); out=$(realpath -m "${2:?out dir}"); steps=${3:-300}; mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH=$bundle/devlibs:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 RETORT_BINARY=$bundle/retort
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
# The corpus the tests and the toy config read.
if [[ ! -d /usr/share/games/fortunes ]]; then mkdir -p /usr/share/games && cp -r "$bundle/fortunes" /usr/share/games/fortunes; fi
cd "$out"
status=0
for t in "$bundle"/tests/retort_*_tests; do
  name=$(basename "$t")
  timeout 600 "$t" >"$out/$name.log" 2>&1 || status=1
  echo "$name: $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran|SKIPPED \]' "$out/$name.log" | tr '\n' ' ')"
done
grep -h "FAILED  \]" "$out"/*.log | sort -u
common=(--config "$here/configs/toy-gpt.yaml" --device cuda data.dir="$out/data" train.log_every=50
  train.steps="$steps" train.eval_every=$((steps / 3)))
"$bundle/retort" train "${common[@]}" run.dir="$out/toy-tp1" >"$out/train-tp1.log" 2>&1 || status=1
tail -4 "$out/train-tp1.log"
if ((gpus >= 2)); then
  "$bundle/retort" train --nproc 2 "${common[@]}" run.dir="$out/toy-tp2" parallel.tp=2 >"$out/train-tp2.log" 2>&1 ||
    status=1
  tail -4 "$out/train-tp2.log"
  # The same run with NCCL's blocking mode (NcclOptions::blocking): what the non-blocking default costs.
  RETORT_NCCL_BLOCKING=1 "$bundle/retort" train --nproc 2 "${common[@]}" run.dir="$out/toy-tp2-blocking" parallel.tp=2 \
    >"$out/train-tp2-blocking.log" 2>&1 || status=1
  grep "train done" "$out/train-tp2-blocking.log" | tail -1
  python3 - "$out/toy-tp1/metrics.jsonl" "$out/toy-tp2/metrics.jsonl" <<'PY' | tee "$out/tp-compare.txt"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
d = [abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a, b)]
e = [(x["step"], x["eval_loss"], y["eval_loss"]) for x, y in zip(a, b) if "eval_loss" in x]
print(f"tp1 vs tp2 on GPUs: {len(d)} steps, max relative loss difference {max(d):.2e}, last {d[-1]:.2e}")
marks = [s for s in (1, 2, 5, 10, 20, 50, 100, 200, 300, 400, 500, 600, 800, 1000) if s <= len(d)]
print("  relative difference by step: " + ", ".join(f"{s}: {d[s - 1]:.1e}" for s in marks))
for s, x, y in e:
    print(f"  step {s}: eval loss tp1 {x:.6f}  tp2 {y:.6f}")
med = lambda rows: sorted(r["tokens_per_s"] for r in rows)[len(rows) // 2]
print(f"  tokens/s (median step): tp1 {med(a):.0f}  tp2 {med(b):.0f}")
PY
  mkdir -p "$out/b/apps" "$out/b/bench"
  ln -sf "$bundle/retort" "$out/b/apps/retort"
  ln -sf "$bundle/bench/bench_comm_bandwidth" "$out/b/bench/bench_comm_bandwidth"
  bash "$here/bench/run_comm_bandwidth.sh" "$out/b" 2 "$out/comm-bandwidth" >"$out/comm-bandwidth.log" 2>&1 || status=1
  tail -30 "$out/comm-bandwidth.log"
fi
exit $status
