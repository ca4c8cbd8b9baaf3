#!/usr/bin/env bash
# Off-policy distillation on the GPU machine: the app's quality table at a larger toy size, the teacher's top-k
# generation throughput at tp 1 and 2, the student's training throughput from the cache against an online teacher
# at tp 1 and 2, and the cache's bytes per token against full logits. Everything in one run, one table.
#   bench/run_distill_bench.sh BUILD_DIR [OUT_DIR] [CONFIG] [STUDENT_STEPS]
# OUT_DIR defaults to runs/distill-bench, CONFIG to configs/distill-gpu.yaml, STUDENT_STEPS (the throughput runs)
# to 200. Needs two GPUs for the tp 2 rows (they are skipped, and say so, with one).
set -euo pipefail
build=${1:?usage: run_distill_bench.sh BUILD_DIR [OUT_DIR] [CONFIG] [STUDENT_STEPS]}
out=${2:-runs/distill-bench}
config=${3:-configs/distill-gpu.yaml}
steps=${4:-200}
py=${PYTHON:-python3}
retort="$build/apps/retort"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
gpus=$( (nvidia-smi -L 2>/dev/null || true) | wc -l)
app="$out/app"
common=(--config "$config" "distill.teacher=$app/teacher")

echo "== the app: teacher, top-k cache, KD and label-only students ($config)"
"$retort" distill run --overwrite --config "$config" "run.dir=$app" "distill.teacher=$app/teacher" \
  "distill.cache_dir=$app/teacher_topk" 2>&1 | tee "$out/app.log"

tps=(1)
if [ "$gpus" -ge 2 ]; then tps+=(2); else echo "== one GPU: the tp 2 rows are skipped"; fi
for tp in "${tps[@]}"; do
  echo "== teacher top-k generation at tp $tp"
  rm -rf "$out/cache-tp$tp"
  "$retort" distill topk --nproc "$tp" "${common[@]}" "parallel.tp=$tp" "run.dir=$out/topk-tp$tp" \
    "distill.cache_dir=$out/cache-tp$tp" 2>&1 | tee "$out/topk-tp$tp.log"
  for mode in cache online; do
    echo "== student from the $mode at tp $tp, $steps steps"
    rm -rf "$out/student-$mode-tp$tp"
    "$retort" distill train --nproc "$tp" "${common[@]}" "parallel.tp=$tp" "distill.mode=$mode" \
      "distill.cache_dir=$app/teacher_topk" "run.dir=$out/student-$mode-tp$tp" "train.steps=$steps" \
      "train.eval_every=$steps" 2>&1 | tee "$out/student-$mode-tp$tp.log"
  done
done

$py - "$out" "$gpus" <<'PY'
import json, os, re, statistics, subprocess, sys

out, gpus = sys.argv[1], int(sys.argv[2])
try:
    device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                            text=True).stdout.strip().splitlines()
except FileNotFoundError:
    device = []
device = f"{len(device)} x {device[0]}" if device else "cpu"
res = json.load(open(os.path.join(out, "app", "results.json")))

def topk_rate(tp):
    path = os.path.join(out, f"topk-tp{tp}.log")
    if not os.path.exists(path):
        return None
    m = re.findall(r"throughput\s+([0-9.]+) tokens/s", open(path).read())
    return float(m[-1]) if m else None

def train_rate(mode, tp):
    path = os.path.join(out, f"student-{mode}-tp{tp}", "metrics.jsonl")
    if not os.path.exists(path):
        return None
    rates = [json.loads(l).get("tokens_per_s") for l in open(path) if l.strip()]
    rates = [r for r in rates if r]
    return statistics.median(rates[len(rates) // 2:]) if rates else None

fmt = lambda x: "-" if x is None else f"{x:,.0f}"
lines = [f"Device: {device}. Config: the app's config (results in {out}/app/results.json).", "",
         "| model | held-out loss | perplexity | KL to teacher | top-1 agreement |", "|---|---|---|---|---|",
         f"| teacher | {res['teacher']['loss']:.4f} | {res['teacher']['perplexity']:.1f} | - | - |"]
for key, name in (("student_kd", "KD student (top-k cache)"), ("student_labels", "label-only student")):
    s = res[key]
    lines.append(f"| {name} | {s['loss']:.4f} | {s['perplexity']:.1f} | {s['kl_to_teacher']:.3f} | "
                 f"{100 * s['top1_agreement']:.1f}% |")
lines += ["", f"Times: teacher {res['teacher_seconds']:.1f} s, cache {res['cache_seconds']:.1f} s "
          f"({res['cache_tokens']:,} tokens), KD student {res['student_kd']['train_seconds']:.1f} s, label-only "
          f"{res['student_labels']['train_seconds']:.1f} s, total {res['total_seconds']:.1f} s.", "",
          "| tp | teacher top-k generation (tokens/s) | student from the cache (tokens/s) | student, online teacher "
          "(tokens/s) | cache / online |", "|---|---|---|---|---|"]
for tp in (1, 2):
    c, o = train_rate("cache", tp), train_rate("online", tp)
    ratio = f"{c / o:.2f}x" if c and o else "-"
    lines.append(f"| {tp} | {fmt(topk_rate(tp))} | {fmt(c)} | {fmt(o)} | {ratio} |")
b, full = res["cache_bytes_per_token"], res["full_logit_bytes_per_token"]
lines += ["", f"Cache: {b:.0f} bytes per token against {full:,} for f32 full logits ({full / b:.0f}x smaller; "
          f"{full // 2:,} for bf16 logits, {full / 2 / b:.0f}x)."]
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
