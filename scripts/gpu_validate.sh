#!/usr/bin/env bash
# Runs the GPU validation on a machine with GPUs, from a bundle built elsewhere (see docs/gpu-validation.md):
#   scripts/gpu_validate.sh BUNDLE_DIR OUT_DIR [STEPS]
# BUNDLE_DIR holds retort, tests/, bench/, devlibs/ (from shared/tools/device-bundle) and fortunes/ (the corpus).
# With 2 or more GPUs it also trains the toy GPT at tp = 2 (and tp = 4 with 4 GPUs) over NCCL, compares each loss
# curve with tp = 1, and runs the NCCL bandwidth benchmark against torch.distributed on 2 (and 4) GPUs.
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
  echo "$name: $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ tests?' "$out/$name.log" | tr '\n' ' ')"
done
grep -h "FAILED  \]" "$out"/*.log | sort -u

common=(--config "$here/configs/toy-gpt.yaml" --device cuda data.dir="$out/data" train.log_every=50
  train.steps="$steps" train.eval_every=$((steps / 3)))
"$bundle/retort" train --overwrite "${common[@]}" run.dir="$out/toy-tp1" >"$out/train-tp1.log" 2>&1 || status=1
grep "validation loss" "$out/train-tp1.log" | tail -1
compare() {  # compare BASE_DIR OTHER_DIR LABEL
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
d = [abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a, b)]
marks = [s for s in (1, 2, 5, 10, 20, 50, 100, 200, 300, 400, 500, 600, 800, 1000) if s <= len(d)]
med = lambda rows: sorted(r["tokens_per_s"] for r in rows)[len(rows) // 2]
print(f"tp1 vs {sys.argv[3]}: {len(d)} steps, max relative loss difference {max(d):.2e}; by step: "
      + ", ".join(f"{s}: {d[s - 1]:.1e}" for s in marks))
for x, y in zip(a, b):
    if "eval_loss" in x:
        print(f"  step {x['step']}: eval loss tp1 {x['eval_loss']:.6f}  {sys.argv[3]} {y['eval_loss']:.6f}")
print(f"  median tokens/s: tp1 {med(a):.0f}  {sys.argv[3]} {med(b):.0f}")
PY
}
for tp in 2 4; do
  ((gpus >= tp)) || continue
  "$bundle/retort" train --overwrite --nproc "$tp" "${common[@]}" run.dir="$out/toy-tp$tp" parallel.tp=$tp \
    >"$out/train-tp$tp.log" 2>&1 || status=1
  compare "$out/toy-tp1" "$out/toy-tp$tp" "tp$tp" | tee "$out/tp$tp-compare.txt"
  RETORT_NCCL_BLOCKING=1 "$bundle/retort" train --overwrite --nproc "$tp" "${common[@]}" run.dir="$out/toy-tp$tp-blocking" \
    parallel.tp=$tp >"$out/train-tp$tp-blocking.log" 2>&1 || status=1
  compare "$out/toy-tp1" "$out/toy-tp$tp-blocking" "tp$tp-blocking" | tail -1
done

mkdir -p "$out/b/apps" "$out/b/bench"
ln -sf "$bundle/retort" "$out/b/apps/retort"
for exe in "$bundle"/bench/*; do ln -sf "$exe" "$out/b/bench/$(basename "$exe")"; done
for n in 2 4; do
  ((gpus >= n)) || continue
  bash "$here/bench/run_comm_bandwidth.sh" "$out/b" "$n" "$out/comm-bandwidth-$n" >"$out/comm-bandwidth-$n.log" 2>&1 ||
    status=1
  cat "$out/comm-bandwidth-$n/table.md"
done
exit $status
