#!/usr/bin/env bash
# Training throughput: retort against its PyTorch eager twin, same model, batch and device, one run.
#   bench/run_train_throughput.sh BUILD_DIR DEVICE [OUT_JSONL]
# Shapes: the toy config (f32 and bf16) and GPT-2 small (124M, context 1024, bf16).
set -euo pipefail
build=${1:?build dir}; device=${2:-cuda}; out=${3:-/dev/null}
py=${PYTHON:-python3}
shapes=(
  "toy-f32|--dtype f32 --batch 16 --seq 128 --vocab 8192 --layers 4 --heads 4 --embd 256"
  "toy-bf16|--dtype bf16 --batch 16 --seq 128 --vocab 8192 --layers 4 --heads 4 --embd 256"
  "gpt2-small-bf16|--dtype bf16 --batch 8 --seq 1024 --vocab 50257 --layers 12 --heads 12 --embd 768"
)
for entry in "${shapes[@]}"; do
  label=${entry%%|*}; args=${entry#*|}
  "$build/bench/bench_train_throughput" --label "$label" --device "$device" $args | tee -a "$out"
  $py "$(dirname "$0")/train_throughput_torch.py" --label "$label" --device "$device" $args | tee -a "$out"
  if [[ $device == cuda* ]]; then
    $py "$(dirname "$0")/train_throughput_torch.py" --label "$label" --device "$device" --attention sdpa $args | tee -a "$out"
  fi
done
$py - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"\n{'shape':18} {'framework':22} {'tokens/s':>12} {'ms/step':>9} {'vs retort':>9}")
for label in dict.fromkeys(r["label"] for r in rows):
    group = [r for r in rows if r["label"] == label]
    base = next(r for r in group if r["framework"] == "retort")["tokens_per_s"]
    for r in group:
        print(f"{label:18} {r['framework']:22} {r['tokens_per_s']:12.0f} {r['ms_per_step']:9.2f} {r['tokens_per_s']/base:9.2f}")
PY
