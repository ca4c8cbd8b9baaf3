#!/usr/bin/env bash
# GPU check of on-policy distillation (distill.on_policy_ratio): the on-policy tests (the objective's loss and
# gradient on CUDA against the CPU's, an on-policy student on the GPU whose reverse KL to the teacher on held-out
# prompts goes down, and the CPU tests of the same files: rollouts, float64 references, tp 1/2/4 local gradients,
# ratio 0 bit for bit), then a small `retort distill run` with distill.on_policy_ratio=1 on one GPU and, when the
# machine has two, the same student at tp 2 through `retort launch --nproc 2` (the tp 1 run's teacher reused).
#   gpu-checks/onpolicy.sh BUILD_DIR     (repo root as cwd; at most 175 s by its timeouts)
set -uo pipefail
build=${1:?usage: gpu-checks/onpolicy.sh BUILD_DIR}
summary='^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure|error|Expected|Which is|actual'
echo "== distill: on-policy tests (CPU and CUDA)"
timeout 60 "$build/tests/retort_distill_tests" \
  --gtest_filter='StudentRollout.*:OnPolicy*' 2>&1 | grep -E "$summary" | head -40

# The fortunes corpus when the machine has it; otherwise the repository's own docs as text.
corpus=/usr/share/games/fortunes
[ -d "$corpus" ] || corpus=$PWD/docs
out=$(mktemp -d /tmp/onpolicy-gpu.XXXXXX)
small=(data.corpus="$corpus" data.dir="$out/data" data.vocab_size=2048 teacher.steps=150 train.steps=100
       train.log_every=25 train.eval_every=50 train.eval_batches=4 train.checkpoint_every=0 teacher.checkpoint_every=0
       distill.on_policy_ratio=1 distill.on_policy_prompt_tokens=32 distill.on_policy_new_tokens=32 run.device=cuda)
echo "== retort distill run, on-policy only, one GPU (teacher 150 steps, students 100)"
start=$SECONDS
timeout 85 "$build/apps/retort" distill run --config configs/distill-toy.yaml "${small[@]}" run.dir="$out/tp1" 2>&1 |
  grep -E "validation|KL|better|worse|error|Error|on-policy|^  (teacher|student)" | tail -16
echo "   ($((SECONDS - start)) s)"
grep -h '"batch_kind"' "$out/tp1/student_kd/metrics.jsonl" | tail -1
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  echo "== retort distill train, on-policy only, 40 steps at tp 2 over 2 GPUs (the tp 1 teacher)"
  timeout 30 "$build/apps/retort" launch --nproc 2 -- distill train --config configs/distill-toy.yaml "${small[@]}" \
    parallel.tp=2 train.steps=40 train.eval_every=20 distill.teacher="$out/tp1/teacher" run.dir="$out/tp2" 2>&1 |
    grep -E "validation|error|Error|on-policy|done" | tail -8
  grep -h '"batch_kind"' "$out/tp2/metrics.jsonl" | tail -1
else
  echo "== one GPU: the tp 2 run is left out"
fi
rm -rf "$out"
exit 0
