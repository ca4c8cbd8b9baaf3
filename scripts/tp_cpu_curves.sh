#!/usr/bin/env bash
# The toy GPT and the distillation student at tp 4 against tp 1 on the CPU (docs/parallel.md, "tp 4 and 8 on the
# CPU"): four short training runs, their loss curves compared step by step and plotted by `retort compare`.
# Usage: scripts/tp_cpu_curves.sh [RUN_ROOT]   (default runs/tp-cpu; needs ./build/apps/retort)
set -euo pipefail
root=${1:-runs/tp-cpu}
retort=./build/apps/retort
steps=200
mkdir -p "$root"

toy=(--config configs/toy-gpt.yaml train.steps=$steps train.eval_every=100 train.checkpoint_every=0)
"$retort" train --overwrite "${toy[@]}" run.dir=$root/toy-tp1
"$retort" train --overwrite --nproc 4 "${toy[@]}" parallel.tp=4 run.dir=$root/toy-tp4

# The tp 1 toy GPT is the teacher; its top-k cache (k 32) serves both students. The student is distill-toy's
# 1 x 64 with 4 heads (2 do not split over 4 ranks).
distill=(--config configs/distill-toy.yaml distill.teacher=$root/toy-tp1 distill.cache_dir=$root/teacher-topk
         model.n_head=4 train.steps=$steps train.eval_every=100)
"$retort" distill topk "${distill[@]}" run.dir=$root/topk
"$retort" distill train --overwrite "${distill[@]}" run.dir=$root/student-tp1
"$retort" distill train --overwrite --nproc 4 "${distill[@]}" parallel.tp=4 run.dir=$root/student-tp4

"$retort" compare $root/toy-tp1 $root/toy-tp4 --names "tp 1" "tp 4" --plot $root/toy-gpt.svg
"$retort" compare $root/student-tp1 $root/student-tp4 --names "tp 1" "tp 4" --plot $root/distill-student.svg
