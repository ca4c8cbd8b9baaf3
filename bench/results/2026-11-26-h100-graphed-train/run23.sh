#!/usr/bin/env bash
# Call R: the graphed trainer as a user runs it: gradient accumulation, a NaN injected at step 6 (the run must stop
# before the update, naming the step and the checkpoint to resume from), --resume from there, and train.cuda_graphs=on.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r23; mkdir -p $RES; trap 'rm -rf $RES/run-*/checkpoints $RES/run-*/step_*; tar czf $OUT/results.tgz -C /tmp r23' EXIT
tar xJf gpu/r.tar.xz -C gpu; b=$PWD/gpu/r; export LD_LIBRARY_PATH=$b/devlibs
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
common=(--device cuda model.dtype=bf16 train.steps=40 train.grad_accum=2 train.eval_every=20 train.checkpoint_every=4 train.log_every=5)
timeout 100 $b/retort train "${common[@]}" train.cuda_graphs=on train.inject_nan_at_step=6 run.dir=$RES/run-nan > $RES/nan.log 2>&1; echo "nan run rc $? (a non-zero stop is expected)"
grep -E "CUDA graph|NaN|nan|non-finite|resume|error" $RES/nan.log | cut -c1-300 | head -8
timeout 100 $b/retort train "${common[@]}" train.cuda_graphs=on run.dir=$RES/run-nan --resume > $RES/resume.log 2>&1; echo "resume rc $?"
grep -E "CUDA graph|resumed|validation loss|done" $RES/resume.log | cut -c1-250 | head -8
timeout 100 $b/retort train "${common[@]}" train.cuda_graphs=off run.dir=$RES/run-off > $RES/off.log 2>&1; echo "eager reference rc $?"
grep -E "validation loss|done" $RES/off.log | cut -c1-200 | tail -3
ls $RES/run-nan
