#!/usr/bin/env bash
# GPU check of the fused causal attention: its tests (float64 references, the materialising path, the ops'
# switch), the attention benchmark (fused, materialised and PyTorch SDPA in one run) and GPT-2 small training
# throughput through each path.
#   gpu-checks/flash.sh BUILD_DIR [OUT_DIR]     (repo root as cwd; about 2-3 minutes on an H100)
set -uo pipefail
build=${1:?usage: gpu-checks/flash.sh BUILD_DIR [OUT_DIR]}
out=${2:-runs/flash-check}
mkdir -p "$out"
# The default kernels (wgmma forward and backward on an H100 / H200), then the others the switches select:
# RETORT_FLASH_FORWARD_KEYS=128 the wgmma forward's 128-key tiles at head size 64 (one CTA a multiprocessor),
# RETORT_FLASH_BACKWARD_KEYS=64 the wgmma backward's one-warpgroup CTAs at head size 64,
# RETORT_FLASH_FORWARD_SCHEDULE=lockstep|pipelined and RETORT_FLASH_BACKWARD_SCHEDULE=lockstep the wgmma kernels' other
# schedules (docs/architecture.md), RETORT_FLASH_BACKWARD_WALK=diagonal the pipelined backward's walk of the query
# tiles from the diagonal, RETORT_FLASH_GRID=tile-fastest the wgmma kernels' grid with the tile fastest (the longest
# CTAs first by default, within chunks of about a wave's (batch, key/value head) pairs: the backward's always, the
# forward's at head size 128), RETORT_FLASH_GRID=longest-first one chunk of every pair, RETORT_FLASH_GRID=chunks
# the forward's chunks at head size 64 too, RETORT_FLASH_FORWARD_PERSISTENT=0 / 1 the copy-engine forward a CTA a work
# item / persistent (by default persistent at head size 128 up to T = 1024), RETORT_FLASH_FORWARD=mma the
# mma.sync forward (32 query rows a warp, or 16 with RETORT_FLASH_ROWS=16),
# RETORT_FLASH_BACKWARD=mma the mma.sync backward (128 keys a CTA at head size 128, 64 at 64; RETORT_FLASH_KEYS=64 /
# 128 the other key tile).
# The ops' GPU-against-CPU tests run with the default kernels only.
for variant in default RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_BACKWARD_KEYS=64 RETORT_FLASH_FORWARD_SCHEDULE=lockstep RETORT_FLASH_FORWARD_SCHEDULE=pipelined RETORT_FLASH_BACKWARD_SCHEDULE=lockstep RETORT_FLASH_BACKWARD_WALK=diagonal RETORT_FLASH_GRID=tile-fastest RETORT_FLASH_GRID=longest-first RETORT_FLASH_GRID=chunks RETORT_FLASH_FORWARD_PERSISTENT=0 RETORT_FLASH_FORWARD_PERSISTENT=1 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma RETORT_FLASH_ROWS=16 RETORT_FLASH_KEYS=64 RETORT_FLASH_KEYS=128; do
  echo "== tests ($variant)"
  filter='CudaFlashAttention.*'
  [[ $variant == default ]] && filter+=':CudaAttention.*:DecoderOpsCuda.*:Ops/OpCudaVsCpu.*/causal*'
  env $([[ $variant == default ]] || echo "$variant") timeout ${TEST_TIMEOUT:-150} "$build/tests/retort_core_tests" \
    --gtest_filter="$filter" 2>&1 | tee "$out/tests-${variant//=/-}.log" |
    grep -E '^\[ *(OK|FAILED|PASSED) *\]|Failure|error|Expected|Which is|actual' | head -40
done
echo "== attention benchmark"
REPEATS=${REPEATS:-5} timeout ${BENCH_TIMEOUT:-200} bench/run_attention_bench.sh "$build" "$out/attention" > "$out/attention.log" 2>&1
cat "$out/attention/table.md" 2>/dev/null
echo "== the other kernel shapes (flash only)"
for variant in RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_BACKWARD_KEYS=64 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma RETORT_FLASH_ROWS=16 RETORT_FLASH_KEYS=64 RETORT_FLASH_KEYS=128; do
  env "$variant" timeout 60 "$build/bench/bench_attention" --paths flash --repeats "${REPEATS:-5}" \
    --shapes 8x2048x32x8x128,8x2048x32x8x64,8x2048x12x12x64 2>&1 | grep -v '^{' | sed "s/^/$variant /"
done
[[ ${SKIP_TRAIN:-0} == 1 ]] && exit 0
echo "== GPT-2 small training, bf16, batch 16 x 1024"
gpt2=(--device cuda --dtype bf16 --batch 16 --seq 1024 --vocab 50257 --layers 12 --heads 12 --embd 768)
for path in flash materialized; do
  if [[ $path == materialized ]]; then export RETORT_ATTENTION=materialized; else unset RETORT_ATTENTION; fi
  timeout ${TRAIN_TIMEOUT:-120} "$build/bench/bench_train_throughput" --label "gpt2-small-bf16-$path" "${gpt2[@]}" 2>&1 |
    tee "$out/train-$path.log" | grep -E '^\{|tokens' | tail -3
done
unset RETORT_ATTENTION
