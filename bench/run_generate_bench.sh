#!/usr/bin/env bash
# The generation benchmark in one command, on the same device in the same run: retort's KV-cache generation
# (bench_generate) with each decode step replayed as a CUDA graph (retort), the same with the fused decode kernels
# switched off (retort-unfused: RETORT_DECODE_FUSED=0, the training forward's ops), with every kernel launched from
# the host (retort-no-graphs), and its PyTorch twin (bench/generate_bench_torch.py) eager (torch-eager) and under
# torch.compile with a static KV cache in mode reduce-overhead (torch-compile-reduce-overhead: CUDA graphs too),
# GPT-2 small's shape (12 layers, 12 heads, width 768, vocab 50304, context 1024), prompt 128, 256 new tokens,
# batch 1 and 32.
#   bench/run_generate_bench.sh BUILD_DIR [OUT_DIR]
# OUT_DIR defaults to runs/generate-bench and gets retort.jsonl, torch.jsonl, the logs and table.md (decode tokens/s
# and prefill ms side by side; ratio = retort tokens/s / torch tokens/s, > 1: retort faster).
# Environment: DEVICE (cuda), DTYPE (bf16), BATCHES (1,32), PROMPT (128), NEW (256), REPEATS (3), TEMPERATURE (0:
# greedy), UNFUSED (1; 0 skips retort-unfused), NO_PDL (0; 1 adds retort-no-pdl: the fused kernels without
# programmatic dependent launch, RETORT_DECODE_PDL=0), ONE_LAUNCH (0; 1 adds retort-one-launch: every GPT
# block of a decode step in one persistent launch at every row count, RETORT_DECODE_LAYERS=1, and retort-per-op: never,
# RETORT_DECODE_LAYERS=0; the default takes it at 4 to 16 rows), LANES (0; 1 adds retort-lanes-attention: the CUDA-core cache
# attention, RETORT_DECODE_ATTENTION=lanes), NO_GRAPHS (1; 0 skips retort-no-graphs), EAGER (1; 0 skips
# torch eager), COMPILE (1; 0 skips the torch.compile peers), COMPILE_MODES (reduce-overhead; space-separated, e.g.
# "default reduce-overhead"), COMPILE_TIMEOUT (900 s per compiled peer: compiling takes a minute or more per batch
# size), PYTHON (python3); SMOKE=1 runs a small shape on the CPU instead (2 layers, width 128, vocab 4096, context 256,
# prompt 32, 32 new tokens, batches 1,4, f32).
set -euo pipefail
build=${1:?usage: run_generate_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-runs/generate-bench}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
if [[ ${SMOKE:-0} == 1 ]]; then
  device=${DEVICE:-cpu}; dtype=${DTYPE:-f32}; batches=${BATCHES:-1,4}; prompt=${PROMPT:-32}; new=${NEW:-32}
  label=smoke; shape=(--vocab 4096 --context 256 --layers 2 --heads 4 --embd 128); compile=${COMPILE:-0}
else
  device=${DEVICE:-cuda}; dtype=${DTYPE:-bf16}; batches=${BATCHES:-1,32}; prompt=${PROMPT:-128}; new=${NEW:-256}
  label=gpt2-small; shape=(--vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768); compile=${COMPILE:-1}
fi
common=(--label "$label" --device "$device" --dtype "$dtype" --batches "$batches" --prompt "$prompt" --new "$new"
  --repeats "${REPEATS:-3}" --temperature "${TEMPERATURE:-0}" "${shape[@]}")
mkdir -p "$out"
rm -f "$out/retort.jsonl" "$out/torch.jsonl"

echo "== retort (CUDA graphs)"
"$build/bench/bench_generate" "${common[@]}" --json "$out/retort.jsonl" 2>&1 | tee "$out/retort.log"
if [[ ${UNFUSED:-1} == 1 ]]; then
  echo "== retort, fused decode kernels off (RETORT_DECODE_FUSED=0; CUDA graphs)"
  RETORT_DECODE_FUSED=0 "$build/bench/bench_generate" "${common[@]}" --json "$out/retort.jsonl" 2>&1 |
    tee "$out/retort-unfused.log"
fi
if [[ ${NO_PDL:-0} == 1 ]]; then
  echo "== retort, programmatic dependent launch off (RETORT_DECODE_PDL=0; CUDA graphs)"
  RETORT_DECODE_PDL=0 "$build/bench/bench_generate" "${common[@]}" --json "$out/retort.jsonl" 2>&1 |
    tee "$out/retort-no-pdl.log"
fi
if [[ ${ONE_LAUNCH:-0} == 1 ]]; then
  echo "== retort, every GPT block of a step in one launch (RETORT_DECODE_LAYERS=1; CUDA graphs)"
  RETORT_DECODE_LAYERS=1 "$build/bench/bench_generate" "${common[@]}" --json "$out/retort.jsonl" 2>&1 |
    tee "$out/retort-one-launch.log"
  echo "== retort, every GPT block op by op (RETORT_DECODE_LAYERS=0; CUDA graphs)"
  RETORT_DECODE_LAYERS=0 "$build/bench/bench_generate" "${common[@]}" --json "$out/retort.jsonl" 2>&1 |
    tee "$out/retort-per-op.log"
fi
if [[ ${LANES:-0} == 1 ]]; then
  echo "== retort, the CUDA-core cache attention (RETORT_DECODE_ATTENTION=lanes; CUDA graphs)"
  RETORT_DECODE_ATTENTION=lanes "$build/bench/bench_generate" "${common[@]}" --json "$out/retort.jsonl" 2>&1 |
    tee "$out/retort-lanes-attention.log"
fi
if [[ ${NO_GRAPHS:-1} == 1 ]]; then
  echo "== retort (no graphs)"
  "$build/bench/bench_generate" "${common[@]}" --graphs false --json "$out/retort.jsonl" 2>&1 |
    tee "$out/retort-no-graphs.log"
fi
if [[ ${EAGER:-1} == 1 ]]; then
  echo "== torch eager"
  $py "$here/generate_bench_torch.py" "${common[@]}" --json "$out/torch.jsonl" 2>&1 | tee "$out/torch.log" ||
    echo "(torch eager failed: see $out/torch.log)"
fi
if [[ $compile == 1 ]]; then
  for mode in ${COMPILE_MODES:-reduce-overhead}; do
    echo "== torch.compile, static cache, mode $mode"
    timeout "${COMPILE_TIMEOUT:-900}" $py "$here/generate_bench_torch.py" "${common[@]}" --compile --compile-mode "$mode" \
      --json "$out/torch.jsonl" 2>&1 | tee "$out/torch-compile-$mode.log" ||
      echo "(torch.compile $mode failed or timed out: see $out/torch-compile-$mode.log)"
  done
fi

$py - "$out" <<'PY'
import json, os, sys

out = sys.argv[1]
rows = []
for name in ("retort.jsonl", "torch.jsonl"):
    path = os.path.join(out, name)
    if os.path.exists(path):
        rows += [json.loads(l) for l in open(path) if l.strip()]
retort = {r["batch"]: r for r in rows if r["framework"] == "retort"}
if not retort:
    sys.exit("no retort measurement: see " + os.path.join(out, "retort.log"))
first = next(iter(retort.values()))
peers = sorted({r["framework"] for r in rows if r["framework"] != "retort"})
lines = [f"Generation with a KV cache, {first['label']} on {first['device']} ({first['dtype']}), prompt "
         f"{first['prompt']} tokens, {first['new_tokens']} new tokens; decode tokens/s over all sequences; "
         "ratio = retort tokens/s / peer tokens/s (> 1: retort faster)", "",
         "| batch | retort prefill ms | retort decode tokens/s | retort ms/step | "
         + " | ".join(f"{p} prefill ms | {p} decode tokens/s | ratio vs {p}" for p in peers) + " |",
         "|---" * (4 + 3 * len(peers)) + "|"]
for batch, r in sorted(retort.items()):
    cells = [str(batch), f"{r['prefill_ms']:.2f}", f"{r['decode_tokens_per_s']:.1f}", f"{r['ms_per_step']:.3f}"]
    for p in peers:
        peer = next((x for x in rows if x["framework"] == p and x["batch"] == batch), None)
        cells += ["-", "-", "-"] if peer is None else [
            f"{peer['prefill_ms']:.2f}", f"{peer['decode_tokens_per_s']:.1f}",
            f"{r['decode_tokens_per_s'] / peer['decode_tokens_per_s']:.2f}x"]
    lines.append("| " + " | ".join(cells) + " |")
table = "\n".join(lines) + "\n"
open(os.path.join(out, "table.md"), "w").write(table)
print("\n" + table)
PY
