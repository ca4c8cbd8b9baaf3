#!/usr/bin/env bash
# Training throughput: retort against its PyTorch twins, same model, batch and device, one run.
#   bench/run_train_throughput.sh BUILD_DIR DEVICE [OUT_JSONL]
# Shapes: the toy config (f32 and bf16) and GPT-2 small (124M, context 1024, bf16) at batch 8 and 16. The twins:
# PyTorch eager with the math attention, eager with scaled_dot_product_attention (sdpa) and, on a GPU,
# torch.compile of the sdpa model (default mode). Peak memory is each process's whole-run peak: retort's pool
# high-water mark, torch.cuda.max_memory_allocated for the twins.
set -euo pipefail
build=${1:?build dir}; device=${2:-cuda}; out=${3:-/dev/null}
py=${PYTHON:-python3}
twin="$(dirname "$0")/train_throughput_torch.py"
shapes=(
  "toy-f32|--dtype f32 --batch 16 --seq 128 --vocab 8192 --layers 4 --heads 4 --embd 256"
  "toy-bf16|--dtype bf16 --batch 16 --seq 128 --vocab 8192 --layers 4 --heads 4 --embd 256"
  "gpt2-small-bf16|--dtype bf16 --batch 8 --seq 1024 --vocab 50257 --layers 12 --heads 12 --embd 768"
  "gpt2-small-bf16-b16|--dtype bf16 --batch 16 --seq 1024 --vocab 50257 --layers 12 --heads 12 --embd 768"
)
for entry in "${shapes[@]}"; do
  label=${entry%%|*}; args=${entry#*|}
  "$build/bench/bench_train_throughput" --label "$label" --device "$device" $args | tee -a "$out"
  $py "$twin" --label "$label" --device "$device" $args | tee -a "$out"
  if [[ $device == cuda* ]]; then
    $py "$twin" --label "$label" --device "$device" --attention sdpa $args | tee -a "$out"
    $py "$twin" --label "$label" --device "$device" --attention sdpa --compile $args | tee -a "$out"
  fi
done
$py - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "tokens_per_s" in r]
print(f"\n{'shape':20} {'framework':22} {'tokens/s':>12} {'ms/step':>9} {'vs retort':>9} {'peak GiB':>9}")
for label in dict.fromkeys(r["label"] for r in rows):
    group = [r for r in rows if r["label"] == label]
    base = next(r for r in group if r["framework"] == "retort")["tokens_per_s"]
    for r in group:
        peak = r.get("peak_memory_gib")
        peak = f"{peak:9.2f}" if peak is not None else f"{'-':>9}"
        print(f"{label:20} {r['framework']:22} {r['tokens_per_s']:12.0f} {r['ms_per_step']:9.2f} "
              f"{r['tokens_per_s']/base:9.2f} {peak}")
PY
