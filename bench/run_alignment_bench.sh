#!/usr/bin/env bash
# The cross-tokenizer alignment benchmark in one command (bench_alignment, one core): characters/s of the offset
# alignment and of the string alignment (Needleman-Wunsch), with the chunk statistics, for Llama-3 -> Qwen3
# (scripts/fetch-hf-tokenizers.sh fetches them) and two SentencePiece BPE tokenizers trained on the corpus, over the
# fortunes corpus and tests/data/xtoken/stress.txt (digit runs, code, CJK, emoji, combining marks).
#   bench/run_alignment_bench.sh BUILD_DIR [OUT_DIR]
# OUT_DIR defaults to runs/alignment-bench and gets alignment.jsonl, alignment.log and table.md. Environment: CORPUS
# (/usr/share/games/fortunes), REPEATS (3), SP_PAIR (2000,8192), PYTHON (python3).
set -euo pipefail
build=${1:?usage: run_alignment_bench.sh BUILD_DIR [OUT_DIR]}
out=${2:-runs/alignment-bench}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
py=${PYTHON:-python3}
mkdir -p "$out"
rm -f "$out/alignment.jsonl"
taskset -c 0 "$build/bench/bench_alignment" \
  --pair "llama3-qwen3=$root/data/hf-tokenizers/llama3/tokenizer.json,$root/data/hf-tokenizers/qwen3/tokenizer.json" \
  --sentencepiece-pair "${SP_PAIR:-2000,8192}" --corpus "${CORPUS:-/usr/share/games/fortunes}" \
  --text "$root/tests/data/xtoken/stress.txt" --repeats "${REPEATS:-3}" --json "$out/alignment.jsonl" 2>&1 |
  tee "$out/alignment.log"
$py - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(out, "alignment.jsonl"))]
lines = ["| pair | text | path | chars/s (one core) | student aligned | teacher aligned | chunks | 1:1 | 1:N | N:1 | N:M | one-sided | tokenize chars/s |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    s = r["chunks_by_shape"]
    lines.append(f"| {r['pair']} | {r['text']} | {r['path']} | {r['chars_per_s']:.3g} | {100 * r['student_share_aligned']:.2f}% | "
                 f"{100 * r['teacher_share_aligned']:.2f}% | {r['chunks']} | {s['1:1']} | {s['1:N']} | {s['N:1']} | {s['N:M']} | "
                 f"{s['student-only'] + s['teacher-only']} | {r['tokenize_chars_per_s']:.3g} |")
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
