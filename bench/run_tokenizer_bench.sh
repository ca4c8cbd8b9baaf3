#!/usr/bin/env bash
# The tokenizer benchmark in one command: retort's tokenizer.json encoder (bench_tokenizer) and Hugging Face
# tokenizers (bench/tokenizer_bench_hf.py) on the same text, one thread each, in the same run: encode MB/s over the
# fortunes corpus for the Llama-3 and Qwen3 tokenizer.json (scripts/fetch-hf-tokenizers.sh fetches them).
#   bench/run_tokenizer_bench.sh BUILD_DIR [OUT_DIR]
# OUT_DIR defaults to runs/tokenizer-bench and gets retort.jsonl, hf.jsonl, the logs and table.md (ratio = retort
# MB/s / HF MB/s, > 1: retort faster). Both run twice: one call per file, then one call per fortune entry
# (--documents). Environment: TOKENIZERS (llama3=...,qwen3=... paths, default
# data/hf-tokenizers/*/tokenizer.json), CORPUS (/usr/share/games/fortunes), REPEATS (3), PYTHON (python3).
set -euo pipefail
build=${1:?usage: run_tokenizer_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-runs/tokenizer-bench}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
specs=()
IFS=, read -ra specs <<<"${TOKENIZERS:-llama3=data/hf-tokenizers/llama3/tokenizer.json,qwen3=data/hf-tokenizers/qwen3/tokenizer.json}"
args=()
for s in "${specs[@]}"; do args+=(--tokenizer "$s"); done
common=(--corpus "${CORPUS:-/usr/share/games/fortunes}" --repeats "${REPEATS:-3}")
mkdir -p "$out"
rm -f "$out/retort.jsonl" "$out/hf.jsonl"
echo "== retort"
for per in "" --documents; do
  taskset -c 0 "$build/bench/bench_tokenizer" "${args[@]}" "${common[@]}" $per --json "$out/retort.jsonl" 2>&1 |
    tee -a "$out/retort.log"
done
echo "== Hugging Face tokenizers"
for per in "" --documents; do
  taskset -c 0 $py "$here/tokenizer_bench_hf.py" "${args[@]}" "${common[@]}" $per --json "$out/hf.jsonl" 2>&1 |
    tee -a "$out/hf.log" || echo "(HF tokenizers failed: see $out/hf.log)"
done
$py - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
def rows(name):
    path = os.path.join(out, name)
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []
# HF tokenizers always computes offsets: each retort mode is set beside the HF run of the same call granularity.
hf = {(r["tokenizer"], r["mode"].endswith("/documents")): r for r in rows("hf.jsonl")}
lines = ["| tokenizer | retort mode | retort MB/s | HF tokenizers MB/s | ratio |", "|---|---|---|---|---|"]
for r in rows("retort.jsonl"):
    h = hf.get((r["tokenizer"], r["mode"].endswith("/documents")))
    ratio = f"{r['mb_per_s'] / h['mb_per_s']:.2f}" if h else "-"
    lines.append(f"| {r['tokenizer']} | {r['mode']} | {r['mb_per_s']:.2f} | {h['mb_per_s']:.2f} | {ratio} |" if h else
                 f"| {r['tokenizer']} | {r['mode']} | {r['mb_per_s']:.2f} | - | - |")
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
