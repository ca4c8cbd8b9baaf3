#!/usr/bin/env bash
# Sweeps toy-GPT settings at a fixed token budget (what a 2-core CPU trains in about 7 minutes), on any device:
#   scripts/sweep_toy.sh RETORT_BINARY DEVICE OUT_DIR
# Prints the final validation loss of each setting; the math is the same on CPU and GPU, so a GPU can pick the
# CPU default quickly.
set -uo pipefail
retort=${1:?retort binary}; device=${2:-cuda}; out=${3:-/tmp/sweep}; mkdir -p "$out"
common=(--config configs/toy-gpt.yaml --device "$device" data.dir="$out/data" train.eval_every=0
        train.checkpoint_every=0 train.log_every=1000)
run() {
  local name=$1; shift
  "$retort" train --overwrite "${common[@]}" run.dir="$out/$name" "$@" >"$out/$name.log" 2>&1
  echo "$name: $(grep -o 'validation loss *[0-9.]*' "$out/$name.log" | tail -1)"
}
# Steps scale with 1 / (6 * (12 * L * d^2 + V * d)), the training FLOPs per token, from 400 steps at L4 d256.
sweep=${SWEEP:-all}
if [[ $sweep == all || $sweep == 1 ]]; then
  run L4d256-lr1e-3-s400 train.steps=400 optim.warmup_steps=30 optim.lr=1e-3
  run L4d256-lr2e-3-s400 train.steps=400 optim.warmup_steps=30 optim.lr=2e-3
  run L4d256-lr3e-3-s400 train.steps=400 optim.warmup_steps=30 optim.lr=3e-3
  run L2d256-lr2e-3-s560 train.steps=560 optim.warmup_steps=30 optim.lr=2e-3 model.n_layer=2
  run L4d192-lr2e-3-s520 train.steps=520 optim.warmup_steps=30 optim.lr=2e-3 model.n_embd=192
  run L6d192-lr2e-3-s420 train.steps=420 optim.warmup_steps=30 optim.lr=2e-3 model.n_embd=192 model.n_layer=6 model.n_head=6
  run L4d256-lr2e-3-b8-s800 train.steps=800 optim.warmup_steps=50 optim.lr=2e-3 train.batch_size=8
  run L4d256-lr3e-3-b8-s800 train.steps=800 optim.warmup_steps=50 optim.lr=3e-3 train.batch_size=8
fi
if [[ $sweep == all || $sweep == 2 ]]; then
  run L2d256-lr3e-3-s570 train.steps=570 optim.warmup_steps=30 optim.lr=3e-3 model.n_layer=2
  run L3d192-lr2e-3-s720 train.steps=720 optim.warmup_steps=40 optim.lr=2e-3 model.n_layer=3 model.n_embd=192
  run L3d192-lr3e-3-s720 train.steps=720 optim.warmup_steps=40 optim.lr=3e-3 model.n_layer=3 model.n_embd=192
  run L2d192-lr3e-3-s860 train.steps=860 optim.warmup_steps=40 optim.lr=3e-3 model.n_layer=2 model.n_embd=192
  run L3d160-lr3e-3-s940 train.steps=940 optim.warmup_steps=50 optim.lr=3e-3 model.n_layer=3 model.n_embd=160
  run L2d128-lr4e-3-s1450 train.steps=1450 optim.warmup_steps=60 optim.lr=4e-3 model.n_layer=2 model.n_embd=128
  run L2d128-lr6e-3-s1450 train.steps=1450 optim.warmup_steps=60 optim.lr=6e-3 model.n_layer=2 model.n_embd=128
  run L3d192-lr3e-3-s720-seq64 train.steps=720 optim.warmup_steps=40 optim.lr=3e-3 model.n_layer=3 model.n_embd=192 train.seq_len=64 train.batch_size=32
fi
