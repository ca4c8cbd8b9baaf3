#!/usr/bin/env bash
# Probe (builds of 0621325 with compile-time edits to flash_attention_wgmma.cu, not kept): the pipelined backward
# without dQ's atomics (p1: add_dq_of left out), without the step copies past the first three (p2: the stage's
# barrier still arrived on), both (p3); the pipelined forward without K/V copies past the first three tiles (p4).
# Timing only; wrong values. p0 is the unchanged kernel.
cd "$(dirname "$0")/.."
RES=/tmp/r1; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r1' EXIT
tar xJf gpu/probe.tar.xz -C gpu; b=$PWD/gpu/probe; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
S=16x1024x32x8x128,4x4096x32x8x128,16x1024x32x8x64,4x4096x32x8x64,4x4096x12x12x64
for round in 1 2; do for v in 0 1 2 3 4; do
  echo "== p$v round $round"
  $b/bench_attention_p$v --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/p$v-r$round.jsonl 2>&1 | grep -v "^$" | tail -6
done; done
