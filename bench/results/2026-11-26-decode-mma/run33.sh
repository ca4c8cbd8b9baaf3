#!/usr/bin/env bash
# Call H: graphed training steps for the top-k cache's distillation. The graphed step's GPU tests (labels and cache
# losses, f32 and bf16), then as a user runs it: `retort distill run --config configs/distill-gpu.yaml` (300 teacher
# and 300 student steps; the KD student on graphed steps, train.cuda_graphs auto), and the same KD student again with
# train.cuda_graphs=off from the same teacher and cache, for the losses and tokens/s side by side.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r33; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude="checkpoints" --exclude="teacher_topk" --exclude="data" -C /tmp r33' EXIT
tar xJf gpu/h2.tar.xz -C gpu; b=$PWD/gpu/h2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 120 $b/tests/retort_distill_tests --gtest_filter='Graphed*' > $RES/tests-graphed.log 2>&1; echo "graphed tests rc $?: $(grep -c '^\[       OK' $RES/tests-graphed.log) ok"
grep -E "FAILED|Failure|fell back" $RES/tests-graphed.log | head -10
R=$RES/dg; common=(data.corpus=$b/fortunes data.dir=$RES/data train.steps=300 train.log_every=50)
timeout 330 $b/retort distill run --config configs/distill-gpu.yaml run.dir=$R teacher.steps=300 "${common[@]}" > $RES/pipeline.log 2>&1; echo "pipeline rc $?"
grep -hE "CUDA graph|without graphs|could not|error|Error" $RES/pipeline.log | head -8
s=(--config configs/distill-gpu.yaml distill.teacher=$R/teacher distill.cache_dir=$R/teacher_topk "${common[@]}")
timeout 120 $b/retort distill train "${s[@]}" run.dir=$RES/kd-eager train.cuda_graphs=off > $RES/kd-eager.log 2>&1; echo "kd eager rc $?"
for m in $R/student_kd/metrics.jsonl $RES/kd-eager/metrics.jsonl; do
  echo "== $m"; python3 - "$m" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "tokens_per_s" in r]
evals = [r for r in rows if "eval_loss" in r]
for r in train[-3:]: print({k: r.get(k) for k in ("step", "loss", "ce", "kd", "grad_norm", "tokens_per_s")})
if evals: print("eval", {k: evals[-1].get(k) for k in ("step", "eval_loss", "eval_kl_to_teacher", "eval_top1_agreement")})
PY
done
tail -25 $RES/pipeline.log | grep -v "^\s*$" | tail -15
